// Defines launch_forward<dtype, dim> for one head dim; each fwd_d<dim>.cu includes this
// and instantiates its dim, so the kernels compile in parallel translation units.
#pragma once

#include "fwd_f32_kernel.cuh"
#include "fwd_mma_kernel.cuh"
#include "fwd_mma_pair_kernel.cuh"
#include "fwd_wgmma_launch.cuh"

#ifndef FLASH_FWD_PAIRS
#define FLASH_FWD_PAIRS 1  // tuning builds may set 0: D = 256 on the plain kernel
#endif

namespace flash::cuda {

template <Dtype kDtype, int kDim>
void launch_forward(const FwdParams& p, int batch, cudaStream_t stream) {
  if constexpr (kDtype == Dtype::f32) {
    launch_fwd_f32<kDim>(p, batch, stream);
  } else {
    using T = std::conditional_t<kDtype == Dtype::f16, __half, __nv_bfloat16>;
    if constexpr (kDim == 64 || kDim == 96 || kDim == 128 || kDim == 192 || kDim == 256) {
      if constexpr (kDim == 128) {
        if (p.wgmma && p.band_tile)
          return launch_fwd_wgmma<T, FwdWgmmaBandConfig<kDim>>(p, batch, stream);
      }
      if (p.wgmma) return launch_fwd_wgmma<T, FwdWgmmaConfig<kDim>>(p, batch, stream);
    }
    if constexpr (kDim == 256 && FLASH_FWD_PAIRS) {
      launch_fwd_mma_pair<T, FwdPairConfig<kDim>>(p, batch, stream);
    } else {
      launch_fwd_mma<T, FwdMmaConfig<kDim>>(p, batch, stream);
    }
  }
}

}  // namespace flash::cuda

#define FLASH_INSTANTIATE_FORWARD(D)                                      \
  template void flash::cuda::launch_forward<flash::cuda::Dtype::f32, D>(  \
      const flash::cuda::FwdParams&, int, cudaStream_t);                  \
  template void flash::cuda::launch_forward<flash::cuda::Dtype::f16, D>(  \
      const flash::cuda::FwdParams&, int, cudaStream_t);                  \
  template void flash::cuda::launch_forward<flash::cuda::Dtype::bf16, D>( \
      const flash::cuda::FwdParams&, int, cudaStream_t);
