// Naive attention evaluated in a storage dtype, the way a framework's unfused math
// path computes it: f32 accumulation inside each product, each product's result
// (scores, probabilities, outputs, gradients) rounded to the dtype. Its error
// against the reference sets the tolerance (FlashAttention's rule, as in the tests):
// a backend may be off by 2 × naive's error + a tiny epsilon.
//
// Works on the oracle's packed f32 sub-problems (batch 1, heads_kv 1): inputs are
// widened from the dtype, so every value is exactly representable in it.
#pragma once

#include <vector>

#include "flash/flash.hpp"

namespace bench {

// sub: packed f32 problem with batch = 1 and heads_kv = 1; dtype: the rounding.
// Returns o [Sq, Hq, Dv].
std::vector<float> naive_forward(const flash::AttentionDesc& sub, flash::DType dtype,
                                 const std::vector<float>& q, const std::vector<float>& k,
                                 const std::vector<float>& v);

struct NaiveGradients {
  std::vector<float> dq, dk, dv;
};

NaiveGradients naive_backward(const flash::AttentionDesc& sub, flash::DType dtype,
                              const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, const std::vector<float>& dout);

}  // namespace bench
