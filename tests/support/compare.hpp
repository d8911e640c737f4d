// The tolerance rule (FlashAttention's): a backend's max error against the double
// reference may be at most 2x the max error of naive attention evaluated in the same
// dtype, plus a tiny epsilon relative to the output's magnitude. NaN never passes.
// Each verdict reports the share of the bound used, so regressions show early.
#pragma once

#include <string>
#include <vector>

#include "flash/flash.hpp"

namespace flash::test {

struct Verdict {
  double error = 0;        // max |got - ref|
  double naive_error = 0;  // max |naive - ref|
  double bound = 0;        // 2 * naive_error + eps
  bool pass = false;
  std::string detail;  // first offending element, share of the bound used

  double share() const { return bound > 0 ? error / bound : 0; }
};

// eps relative to the result's magnitude, per dtype (f32 1e-6, f16 1e-4, bf16 1e-3).
double relative_epsilon(DType dtype);

// Largest finite |x|.
double magnitude(const std::vector<double>& x);

// magnitude: the scale eps is relative to; by default max |ref|. Gradients pass the
// largest of dq, dk, dv, since one of them can be exactly zero (e.g. a single key)
// while the backend's rounding is not.
Verdict compare(const std::string& what, const std::vector<double>& got,
                const std::vector<double>& ref, const std::vector<double>& naive, DType dtype,
                double magnitude = -1);

}  // namespace flash::test
