// Expected outputs from the reference backend (scalar, double accumulation) and the
// error of a backend against them.
//
// The reference is slow, so large problems are checked on samples, each a
// sub-problem the reference solves exactly:
//  - a slice = one batch entry and one KV head with the query heads it serves (so
//    GQA groups and dk/dv sums stay whole), all rows: used whenever it fits the
//    budget; forward and backward;
//  - when even one slice is too expensive: blocks of query rows of the first and
//    last slices (for a backward, only dq is checked there: dq of a row depends on
//    that row and the keys alone, while dk and dv sum over all rows). Rows [r0, r1) with keys [0,
//    Sk - Sq + r1) keep every row's diagonal (bottom-right alignment: diag = i + Sk - Sq), so the
//    mask is unchanged. Dropping the keys past Sk - Sq + r1 is exact only when no row can see past
//    its diagonal (causal, or window_right = 0); otherwise only the last block (r1 = Sq, all keys)
//    is used.
// Packed batches, caches with lengths and paged caches (sequences.hpp) are sampled the
// same way per sequence, with that sequence's lengths: a slice's rows and keys are
// gathered from wherever they lie (pages included) into a dense sub-problem, so the
// expected values never go through the layout code under test.
// The reference runs in f32 on the widened inputs (f16/bf16 widen exactly), so the
// expected values carry no rounding of the dtype under test.
//
// Tolerance (FlashAttention's rule, the same as the test suite's): per output,
//   bound = 2 × max|naive - expected| + eps · magnitude,
// where naive is attention evaluated in the dtype under test (reference/naive.hpp) on
// the same sample, magnitude is max|expected| (backward: the largest over dq, dk,
// dv) and eps = 1e-6 f32, 1e-4 f16, 1e-3 bf16. "tol used" = error / bound.
#pragma once

#include <string>
#include <vector>

#include "common/workload.hpp"
#include "flash/flash.hpp"

namespace bench {

// eps of the tolerance rule, relative to the outputs' magnitude.
double relative_epsilon(flash::DType dtype);

struct CheckResult {
  bool checked = false;
  std::string coverage;         // "all rows", "2 of 16 slices", ... or why not checked
  double relative_error = 0.0;  // max|out - expected| / magnitude, worst output
  double tolerance = 0.0;       // that output's bound / magnitude
  double tolerance_used = 0.0;  // error / bound, worst output; > 1 fails
};

class Oracle {
 public:
  // Solves the sampled sub-problems with the reference backend. flop_budget bounds
  // the reference's work (forward FLOPs, + backward FLOPs for a backward). desc's
  // inference arrays are host memory and must outlive the Oracle. Throws flash::Error
  // for a problem the reference refuses (the message names the field).
  Oracle(const flash::AttentionDesc& desc, bool backward, const HostInputs& inputs,
         double flop_budget);

  // Compares a workload's outputs (same desc, same inputs) with the expected ones.
  CheckResult check(Workload& workload) const;

  // Cost of the reference itself on the sample: milliseconds and FLOPs of the
  // measured direction, for the reference's row in a table.
  double reference_ms() const { return reference_ms_; }
  double reference_flops() const { return reference_flops_; }
  const std::string& coverage() const { return coverage_; }
  bool checked() const { return !blocks_.empty(); }

 private:
  // One sub-problem: sequence b, KV head kv_head, its query rows [row_begin, row_end),
  // its keys [0, keys); expected outputs packed as [rows, group, dim] / [keys, 1, dim].
  struct Block {
    int64_t b, kv_head, row_begin, row_end, keys;
    std::vector<float> o, dq, dk, dv;
  };
  // Outputs compared: o for a forward; dq, dk, dv for a backward.
  enum Output { kO, kDq, kDk, kDv, kOutputs };

  void solve(Block& block, const HostInputs& inputs);
  // dk and dv sum over all rows: only a whole slice has their exact values.
  bool whole_slice(const Block& b) const;

  flash::AttentionDesc desc_;
  bool backward_;
  std::vector<Block> blocks_;
  std::string coverage_;
  double reference_ms_ = 0.0;
  double reference_flops_ = 0.0;
  double naive_error_[kOutputs] = {};  // max|naive - expected| per output
};

}  // namespace bench
