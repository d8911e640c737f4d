// Naive attention evaluated in the storage dtype, the way a framework's unfused
// math path does it: f32 accumulation inside each product, each product's result
// (scores, probabilities, outputs, gradients) rounded to the dtype. Its error
// against the double reference sets the tolerance (FlashAttention's rule).
#pragma once

#include "dispatch/module_abi.h"
#include "reference/reference.hpp"

namespace flash::reference {

ForwardResult naive_forward(const flash_problem& p, const void* q, const void* k, const void* v);

BackwardResult naive_backward(const flash_problem& p, const void* q, const void* k, const void* v,
                              const void* dout);

}  // namespace flash::reference
