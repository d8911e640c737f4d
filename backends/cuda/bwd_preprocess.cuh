// Backward preprocessing: per query row, Δ = rowsum(dO∘O) in f32 and the row's
// log-sum-exp rescaled for the exponential the main kernels use (lse·log2(e) for
// exp2 on tensor-core paths, lse itself for the f32 path). Rows that see no key have
// lse = -inf; they are stored as +inf so p = exp(x − lse) = 0 and they add nothing.
// Output rows are padded to kBwdRowPad (lse = +inf, Δ = 0) so the main kernels read
// whole tiles: workspace [batch, heads_q, rows_pad] for each.
// Memory bound: reads dO and O once (8 lanes per row, 16-byte loads).
#pragma once

#include <cuda_runtime.h>

#include "bwd_ops.cuh"

namespace flash::cuda {

constexpr int kPreLanesPerRow = 8, kPreThreads = 256;
constexpr int kPreRowsPerBlock = kPreThreads / kPreLanesPerRow;

template <class T>
__global__ void __launch_bounds__(kPreThreads)
    bwd_preprocess_kernel(const BwdParams p, float* lse_out, float* delta_out, int rows_pad,
                          float log_scale) {
  constexpr int kVec = 16 / sizeof(T);  // elements per 16-byte chunk
  const int head = blockIdx.y;
  const int64_t batch = (int64_t)blockIdx.z + p.f.batch_offset;
  const SequenceRows seq = sequence_rows(p.f, batch, head);
  const int sq = seq.mask.seqlen_q;  // this sequence's rows (packed batches)
  const int row = blockIdx.x * kPreRowsPerBlock + threadIdx.x / kPreLanesPerRow;
  const int sub = threadIdx.x % kPreLanesPerRow;
  // The grid covers rows_pad exactly (a multiple of kPreRowsPerBlock): no early exit,
  // every lane takes part in the shuffles.
  float acc = 0.f;
  if (row < sq) {
    const int64_t off = seq.o + (int64_t)row * p.f.o_stride[1] + head * p.f.o_stride[2];
    const T* o = static_cast<const T*>(p.f.o) + off;
    const T* dout = static_cast<const T*>(p.dout) + off;
    for (int c = sub * kVec; c < p.f.head_dim_v; c += kPreLanesPerRow * kVec) {
      const uint4 ov = *reinterpret_cast<const uint4*>(o + c);
      const uint4 dv = *reinterpret_cast<const uint4*>(dout + c);
      const T* oe = reinterpret_cast<const T*>(&ov);
      const T* de = reinterpret_cast<const T*>(&dv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc = fmaf(float(oe[e]), float(de[e]), acc);
    }
  }
#pragma unroll
  for (int off = kPreLanesPerRow / 2; off > 0; off /= 2)
    acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (sub == 0) {
    const int64_t out = (batch * p.f.heads_q + head) * rows_pad + row;
    float l = INFINITY;
    if (row < sq) {
      const float lse = p.f.lse[seq.lse + row];
      l = lse == -INFINITY ? INFINITY : lse * log_scale;
    }
    lse_out[out] = l;
    delta_out[out] = acc;
  }
}

template <class T>
void launch_bwd_preprocess(const BwdParams& params, int batch, float* lse_out, float* delta_out,
                           int rows_pad, float log_scale, cudaStream_t stream) {
  BwdParams p = params;
  for (int b0 = 0; b0 < batch; b0 += 65535) {  // gridDim.z is at most 65535
    p.f.batch_offset = b0;
    const dim3 grid(rows_pad / kPreRowsPerBlock, p.f.heads_q, std::min(batch - b0, 65535));
    bwd_preprocess_kernel<T>
        <<<grid, kPreThreads, 0, stream>>>(p, lse_out, delta_out, rows_pad, log_scale);
  }
}

}  // namespace flash::cuda
