// Command line of flashattn-compare.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flash/flash.hpp"

namespace compare {

// Query rows per sequence up to which a problem counts as decode (memory bound):
// speculative decoding verifies a handful of draft tokens per step.
constexpr int64_t kDecodeRows = 16;

struct Options {
  flash::AttentionDesc base;     // every field but seqlen_q / seqlen_kv / batch
  std::vector<int64_t> seqlens;  // one problem per entry (a sweep when > 1)
  int64_t seqlen_kv = 0;         // 0: equal to each seqlen (a cache: its longest length)
  int64_t batch = 0;             // 0: not given (1, or the length lists' count)
  int64_t tokens = 0;            // > 0: batch = max(1, tokens / seqlen) per point
  bool backward = false;
  // Inference problems (see --help): 0 / empty = off.
  int64_t page_size = 0;            // --paged: K/V in a paged cache of this page size
  bool pages_in_order = false;      // --pages in-order: block table b * pages_per_seq + j
  std::vector<int64_t> seqlens_kv;  // --seqlens-kv: cache length of each sequence
  std::vector<int64_t> varlen;      // --varlen: lengths of a packed batch's sequences
  // Decode-style rows: K+V GB/s beside a device copy of as many bytes, measured in the
  // same run. On for forward problems with an inference flag or at most kDecodeRows
  // query rows at every point.
  bool copy_ceiling = false;
  std::vector<flash::Backend> backends;  // empty: every backend the library knows
  int iters = 10;
  double max_seconds = 2.0;
  double check_budget_gflop = 0.5;  // reference work allowed per problem; 0 = no check
  uint64_t seed = 1;
  std::string json_path, plot_path;
};

// Parses argv. Prints help and exits 0 for --help; throws std::invalid_argument
// naming the option and the bad value otherwise.
Options parse_args(int argc, char** argv);

}  // namespace compare
