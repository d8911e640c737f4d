// Command line of flashattn-compare.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flash/flash.hpp"

namespace compare {

struct Options {
  flash::AttentionDesc base;     // every field but seqlen_q / seqlen_kv / batch
  std::vector<int64_t> seqlens;  // one problem per entry (a sweep when > 1)
  int64_t seqlen_kv = 0;         // 0: equal to each seqlen
  int64_t batch = 1;
  int64_t tokens = 0;  // > 0: batch = max(1, tokens / seqlen) per point
  bool backward = false;
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
