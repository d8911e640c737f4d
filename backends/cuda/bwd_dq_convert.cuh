// Backward postprocessing of dQ: dq = scale · Σ_s slice[s] (s = 0, 1, ... in order: the
// same sum every run), converted to the output dtype and written with q's strides.
// Slices are the f32 partial sums of bwd_kv_kernel (one per split in the deterministic
// mode, one in all in the atomic mode). Memory bound: 4 columns per thread (16-byte
// loads), about 256 threads a block.
#pragma once

#include <cuda_runtime.h>

#include "bwd_ops.cuh"

namespace flash::cuda {

// Threads per row (4 columns each) and rows per block of about 256 threads.
template <int kDim>
struct DqConvertShape {
  static constexpr int kPerRow = kDim / 4, kRowsPerBlock = 256 / kPerRow;
  static constexpr int kThreads = kPerRow * kRowsPerBlock;
  static_assert(kDim % 4 == 0 && kRowsPerBlock >= 1, "whole rows per block");
};

template <class T, int kDim>
__global__ void __launch_bounds__(DqConvertShape<kDim>::kThreads)
    bwd_dq_convert_kernel(const BwdParams p, int rows_pad) {
  constexpr int kPerRow = DqConvertShape<kDim>::kPerRow;
  constexpr int kRowsPerBlock = DqConvertShape<kDim>::kRowsPerBlock;
  const FwdParams& f = p.f;
  const int head = blockIdx.y;
  const int64_t batch = (int64_t)blockIdx.z + f.batch_offset;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kPerRow;
  const int col = (threadIdx.x % kPerRow) * 4;
  const SequenceRows seq = sequence_rows(f, batch, head);
  if (row >= seq.mask.seqlen_q || col >= f.head_dim) return;  // this sequence's rows
  const float* acc =
      p.dq_accum + ((batch * f.heads_q + head) * rows_pad + row) * p.dq_row_floats + col;
  // A row that sees no key has dq = 0: in the ordered mode no block may have written its
  // part of the accumulator, which is not zeroed there (bwd_wgmma_kernel.cuh, the dQ warp).
  const KeyRange keys = visible_keys(seq.mask, row, row);
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  if (keys.begin < keys.end) {
    sum = *reinterpret_cast<const float4*>(acc);
    for (int s = 1; s < p.dq_slices; ++s) {
      const float4 a = *reinterpret_cast<const float4*>(acc + s * p.dq_slice_floats);
      sum.x += a.x;
      sum.y += a.y;
      sum.z += a.z;
      sum.w += a.w;
    }
  }
  T* dq = static_cast<T*>(p.dq) + seq.q + (int64_t)row * f.q_stride[1] + head * f.q_stride[2] + col;
  // head_dim is a multiple of 8 and strides of 16 bytes: 4 elements stay in bounds/aligned.
  *reinterpret_cast<uint2*>(dq) = make_uint2(pack2<T>(sum.x * f.scale, sum.y * f.scale),
                                             pack2<T>(sum.z * f.scale, sum.w * f.scale));
}

template <class T, int kDim>
void launch_bwd_dq_convert(const BwdParams& params, int batch, int rows_pad, cudaStream_t stream) {
  using S = DqConvertShape<kDim>;
  BwdParams p = params;
  for (int b0 = 0; b0 < batch; b0 += 65535) {  // gridDim.z is at most 65535
    p.f.batch_offset = b0;
    const dim3 grid((p.f.mask.seqlen_q + S::kRowsPerBlock - 1) / S::kRowsPerBlock, p.f.heads_q,
                    std::min(batch - b0, 65535));
    bwd_dq_convert_kernel<T, kDim><<<grid, S::kThreads, 0, stream>>>(p, rows_pad);
  }
}

}  // namespace flash::cuda
