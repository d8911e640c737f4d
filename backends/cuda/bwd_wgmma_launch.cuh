// Host launch of the wgmma backward (bwd_wgmma_kernel.cuh): the Q and dO tensor maps for the
// loader's TMA copies, then one block per key block (launch_bwd_blocks).
#pragma once

#include <algorithm>
#include <type_traits>

#include "bwd_wgmma_kernel.cuh"
#include "phase_trace.cuh"
#include "tma_map.hpp"

namespace flash::cuda {

// kSoftcap: whether the problem has a softcap; it runs BwdWgmmaConfigFor<kDim, kSoftcap>, the
// config the host plan took (with_wgmma_config).
template <class T, int kDim, bool kSoftcap>
void launch_bwd_wgmma(const BwdParams& params, int batch, const float* lse2, const float* delta,
                      int rows_pad, cudaStream_t stream) {
  using C = BwdWgmmaConfigFor<kDim, kSoftcap>;
  // Q and dO maps over [batch, seqlen_q, heads_q, dim] (their pointers and strides are
  // 16-byte aligned: cuda_backend.cu checks before any backward).
  const FwdParams& f = params.f;
  BwdLoadMaps maps{};
  maps.use = f.cu_seqlens_q == nullptr && f.mask.seqlen_q > 0;
  if (maps.use) {
    const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
    maps.q = make_tile_map({f.q, bf16, f.head_dim, f.mask.seqlen_q, f.heads_q, batch, f.q_stride[1],
                            f.q_stride[2], f.q_stride[0], C::kBlockQ});
    maps.dout = make_tile_map({params.dout, bf16, f.head_dim_v, f.mask.seqlen_q, f.heads_q, batch,
                               f.o_stride[1], f.o_stride[2], f.o_stride[0], C::kBlockQ});
  }
  phase_trace_before_launch(stream);
  // One kernel in both of launch_bwd_blocks' places: the config already says softcap or not.
  constexpr auto kKernel = bwd_wgmma_kernel<T, C, kSoftcap>;
  launch_bwd_blocks<kKernel, kKernel>(params, batch, C::kThreads, BwdWgmmaLayout<C>::kSmemBytes,
                                      lse2, delta, rows_pad, stream, maps);
  phase_trace_after_launch(stream, C::kName, kBwdTraceRoleNames, kBwdTracePhaseNames);
}

}  // namespace flash::cuda
