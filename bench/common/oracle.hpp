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
// The reference runs in f32 on the widened inputs (f16/bf16 widen exactly), so the
// expected values carry no rounding of the dtype under test.
//
// Tolerance (a simple per-dtype bound, relative to max|expected| of each output;
// the test suite uses the stricter "2 × naive attention in the same dtype" rule):
//   forward  f32 1e-5, f16 2e-3, bf16 1.6e-2
//   backward f32 1e-4, f16 1e-2, bf16 5e-2
// These are a few units of the dtype's rounding (f16 2^-11, bf16 2^-8 relative),
// more for backward, whose outputs are sums over a whole sequence.
#pragma once

#include <string>
#include <vector>

#include "common/workload.hpp"
#include "flash/flash.hpp"

namespace bench {

double tolerance_for(flash::DType dtype, bool backward);

struct CheckResult {
  bool checked = false;
  std::string coverage;         // "all rows", "2 of 16 slices", ... or why not checked
  double relative_error = 0.0;  // max|out - expected| / max|expected|, worst output
  double tolerance = 0.0;
  double tolerance_used = 0.0;  // relative_error / tolerance; > 1 fails
};

class Oracle {
 public:
  // Solves the sampled sub-problems with the reference backend. flop_budget bounds
  // the reference's work (forward FLOPs, + backward FLOPs for a backward).
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
  // One sub-problem: batch entry b, KV head kv_head, query rows [row_begin, row_end),
  // keys [0, keys); expected outputs packed as [rows, group, dim] / [keys, 1, dim].
  struct Block {
    int64_t b, kv_head, row_begin, row_end, keys;
    std::vector<float> o, dq, dk, dv;
  };
  void solve(Block& block, const HostInputs& inputs);

  flash::AttentionDesc desc_;
  bool backward_;
  std::vector<Block> blocks_;
  std::string coverage_;
  double reference_ms_ = 0.0;
  double reference_flops_ = 0.0;
};

}  // namespace bench
