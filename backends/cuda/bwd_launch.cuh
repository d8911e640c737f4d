// Defines launch_backward<dtype, dim> for one tile head dim; each bwd_d<dim>.cu includes
// this and instantiates its dim, so the kernels compile in parallel translation units.
//
// Launch order on desc.stream (no synchronisation): preprocess (Δ, lse rescaled) ->
// dK/dV/dQ-partials -> dQ convert. Workspace (p.delta, from the cached per-(device,
// stream) buffer): f32 [batch, heads_q, rows_pad] Δ, then lse, then p.dq_slices f32 dQ
// slices [batch, heads_q, rows_pad, p.dq_row_floats] and the ordered mode's counters
// (bwd_dq_plan); cuda_backend.cu zeroes the slices and counters before this runs.
#pragma once

#include "bwd_dq_convert.cuh"
#include "bwd_f32_kernel.cuh"
#include "bwd_kv_kernel.cuh"
#include "bwd_preprocess.cuh"
#include "bwd_wgmma_launch.cuh"

namespace flash::cuda {

template <Dtype kDtype, int kDim>
void launch_backward(const BwdParams& p, int batch, cudaStream_t stream) {
  const int rows_pad = static_cast<int>(bwd_rows_pad(p.f.mask.seqlen_q));
  float* delta = p.delta;
  float* lse = p.delta + (int64_t)batch * p.f.heads_q * rows_pad;
  if constexpr (kDtype == Dtype::f32) {
    launch_bwd_preprocess<float>(p, batch, lse, delta, rows_pad, 1.f, stream);
    launch_bwd_f32<kDim>(p, batch, lse, delta, rows_pad, stream);
  } else {
    using T = std::conditional_t<kDtype == Dtype::f16, __half, __nv_bfloat16>;
    launch_bwd_preprocess<T>(p, batch, lse, delta, rows_pad, kBwdLog2e, stream);
    if constexpr (kDim == 64 || kDim == 96 || kDim == 128 || kDim == 192 || kDim == 256) {
      if (p.wgmma && p.f.softcap > 0.f)
        launch_bwd_wgmma<T, kDim, true>(p, batch, lse, delta, rows_pad, stream);
      else if (p.wgmma)
        launch_bwd_wgmma<T, kDim, false>(p, batch, lse, delta, rows_pad, stream);
      else
        launch_bwd_kv<T, BwdKvConfig<kDim>>(p, batch, lse, delta, rows_pad, stream);
    } else {
      launch_bwd_kv<T, BwdKvConfig<kDim>>(p, batch, lse, delta, rows_pad, stream);
    }
    launch_bwd_dq_convert<T, kDim>(p, batch, rows_pad, stream);
  }
}

}  // namespace flash::cuda

#define FLASH_INSTANTIATE_BACKWARD(D)                                      \
  template void flash::cuda::launch_backward<flash::cuda::Dtype::f32, D>(  \
      const flash::cuda::BwdParams&, int, cudaStream_t);                   \
  template void flash::cuda::launch_backward<flash::cuda::Dtype::f16, D>(  \
      const flash::cuda::BwdParams&, int, cudaStream_t);                   \
  template void flash::cuda::launch_backward<flash::cuda::Dtype::bf16, D>( \
      const flash::cuda::BwdParams&, int, cudaStream_t);
