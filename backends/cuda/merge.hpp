// merge_partials on the device (merge_kernel.cu).
#pragma once

#include <cstdint>

#include "kernel_params.hpp"

namespace flash::cuda {

struct MergeParams {
  int64_t batch, seqlen_q, heads_q, head_dim_v, parts;
  int64_t o_stride[3];
  const int* cu_seqlens_q;  // device; null when dense
  const void* o_parts;
  const float* lse_parts;
  void* o;
  float* lse;  // may be null
};

void launch_merge(const MergeParams& m, Dtype dtype, cudaStream_t stream);

}  // namespace flash::cuda
