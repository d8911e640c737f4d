// Forward attention for f32 inputs with plain f32 FMA (no TF32), the default f32 path.
//
// Algorithm: one block per (32 query rows, head, batch), 4 warps of 8 rows each. Per
// tile of 32 keys (one per lane): each lane computes its key's score against the
// warp's 8 rows (Q rows are read as broadcasts, K rows padded so lanes hit distinct
// banks), the warp reduces the row max with shuffles, and P·V runs with lane-owned
// output columns (lane, lane+32, ...). Online softmax with expf in natural units, the
// same operations a naive f32 evaluation does, so errors stay at f32 rounding level.
// Tolerance class: f32 (FMA accumulation, relative error ~1e-6).
// Measured (H200, D = 64/128/256, S = 1k/4k, 2026-11-21): 20-25 TFLOP/s, about 0.55x
// torch SDPA mem-efficient f32. Tables: bench/RESULTS.md.
// Run: tests/cuda/device_run.sh (check; bench with DTYPES=f32).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "device_ops.cuh"
#include "kernel_params.hpp"
#include "mask.cuh"
#include "sequence.cuh"
#include "tile_configs.hpp"

namespace flash::cuda {

// Loads rows [row0, row0 + kRows) (first `ncols` columns, rest zero) of an f32 matrix
// into a tile with rows of kRowFloats floats.
template <int kRows, int kDim, int kRowFloats, int kThreads>
__device__ __forceinline__ void load_f32_rows(float* tile, const float* g, int64_t stride, int row0,
                                              int nrows, int ncols) {
  constexpr int kChunks = kDim / 4;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const bool valid = (row0 + r < nrows) && (c * 4 < ncols);
    const float* src = valid ? g + (int64_t)(row0 + r) * stride + c * 4 : g;
    cp_async_16(smem_addr(tile + r * kRowFloats + c * 4), src, valid);
  }
}

template <int kDim>
__global__ void __launch_bounds__(FwdF32Config::kWarps * 32) fwd_f32_kernel(const FwdParams p) {
  using C = FwdF32Config;
  constexpr int R = C::kRowsPerWarp, BK = C::kBlockKV, kThreads = C::kWarps * 32;
  constexpr int RF = FwdF32Smem<kDim>::kRowFloats;
  constexpr int CT = kDim / 32;  // output columns per lane
  static_assert(BK == 32, "one key per lane");
  static_assert(kDim % 32 == 0, "columns split evenly over lanes");

  extern __shared__ __align__(16) float fsmem[];
  float* sQ = fsmem;
  float* sK = sQ + C::kBlockQ * RF;
  float* sV = sK + BK * RF;

  const int head = blockIdx.y;
  const int64_t batch = (int64_t)blockIdx.z + p.batch_offset;
  const int kv_head = head / p.group;
  const SequenceRows seq = sequence_rows(p, batch, head);
  const MaskParams& mask = seq.mask;  // this sequence's lengths (packed batches, caches)
  const int sq = mask.seqlen_q, skv = mask.seqlen_kv;
  const float* q = static_cast<const float*>(p.q) + seq.q + head * p.q_stride[2];
  const float* k = static_cast<const float*>(p.k) + seq.k + kv_head * p.k_stride[2];
  const float* v = static_cast<const float*>(p.v) + seq.v + kv_head * p.v_stride[2];
  float* o = static_cast<float*>(p.o) + seq.o + head * p.o_stride[2];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * C::kBlockQ;
  if (q0 >= sq) return;  // a packed sequence shorter than the launch's longest: whole block
  const int q_last = min(q0 + C::kBlockQ, sq) - 1;
  const int row0 = q0 + warp * R;  // this warp's first row
  const KeyRange keys = visible_keys(mask, q0, q_last);
  const bool use_softcap = p.softcap > 0.f;
  const float cap_in = use_softcap ? p.scale / p.softcap : 0.f;
  // Scores stay raw (capped under softcap) and p = exp((x - max)·emult): the difference
  // is exact near the max, so exponents keep f32's relative precision at any logit size
  // (fwd_tile_ops.cuh, online_softmax_max).
  const float emult = use_softcap ? 1.f : p.scale;

  load_f32_rows<C::kBlockQ, kDim, RF, kThreads>(sQ, q, p.q_stride[1], q0, sq, p.head_dim);
  cp_async_commit();

  float acc[R][CT], row_max[R], row_sum[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.f;
#pragma unroll
    for (int t = 0; t < CT; ++t) acc[r][t] = 0.f;
  }

  for (int k0 = keys.begin - keys.begin % BK; k0 < keys.end; k0 += BK) {
    __syncthreads();  // everyone is done with the previous K/V tile
    load_f32_rows<BK, kDim, RF, kThreads>(sK, k, p.k_stride[1], k0, skv, p.head_dim);
    load_f32_rows<BK, kDim, RF, kThreads>(sV, v, p.v_stride[1], k0, skv, p.head_dim_v);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    // Four partial sums per dot (the float4 lanes), added at the end: a quarter of the
    // rounding of one running sum, which every p's exponent carries at large logits.
    float4 part[R];
#pragma unroll
    for (int r = 0; r < R; ++r) part[r] = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4* krow = reinterpret_cast<const float4*>(sK + lane * RF);
#pragma unroll 4
    for (int c = 0; c < kDim / 4; ++c) {
      const float4 kv = krow[c];
#pragma unroll
      for (int r = 0; r < R; ++r)
        part[r] = fma4(reinterpret_cast<const float4*>(sQ + (warp * R + r) * RF)[c], kv, part[r]);
    }
    float s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = (part[r].x + part[r].y) + (part[r].z + part[r].w);

    const int key = k0 + lane;
    float pr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float x = use_softcap ? p.softcap * tanhf(s[r] * cap_in) : s[r];
      if (!key_visible(mask, row0 + r, key)) x = -INFINITY;
      float mx = x;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      mx = fmaxf(mx, row_max[r]);
      const float base = mx == -INFINITY ? 0.f : mx;  // no visible key yet: avoid inf - inf
      const float alpha = expf((row_max[r] - base) * emult);
      row_max[r] = mx;
      pr[r] = expf((x - base) * emult);
      row_sum[r] = row_sum[r] * alpha + pr[r];  // per-lane partial, reduced at the end
#pragma unroll
      for (int t = 0; t < CT; ++t) acc[r][t] *= alpha;
    }
    // On tiles that straddle the mask, a key a row does not see is skipped, not
    // multiplied by p = 0: a NaN or inf in its v must not reach the row (0·NaN = NaN).
    // The condition is uniform over the warp (one row, all lanes), so nothing diverges.
    const bool masked = !tile_fully_visible(mask, q0, q_last, k0, k0 + BK - 1);
#pragma unroll 8
    for (int j = 0; j < BK; ++j) {
      float vj[CT];
#pragma unroll
      for (int t = 0; t < CT; ++t) vj[t] = sV[j * RF + lane + 32 * t];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float pj = __shfl_sync(0xffffffffu, pr[r], j);
        if (masked && !key_visible(mask, row0 + r, k0 + j)) continue;
#pragma unroll
        for (int t = 0; t < CT; ++t) acc[r][t] = fmaf(pj, vj[t], acc[r][t]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < R; ++r) {
    float l = row_sum[r];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) l += __shfl_xor_sync(0xffffffffu, l, off);
    const int row = row0 + r;
    if (row >= sq) continue;
    const float inv = l == 0.f ? 0.f : 1.f / l;  // no key seen: o = 0; NaN stays NaN
    float* orow = o + (int64_t)row * p.o_stride[1];
#pragma unroll
    for (int t = 0; t < CT; ++t)
      if (lane + 32 * t < p.head_dim_v) orow[lane + 32 * t] = acc[r][t] * inv;
    if (p.lse != nullptr && lane == 0)
      p.lse[seq.lse + row] = l == 0.f ? -INFINITY : fmaf(row_max[r], emult, logf(l));
  }
}

template <int kDim>
void launch_fwd_f32(const FwdParams& params, int batch, cudaStream_t stream) {
  using C = FwdF32Config;
  constexpr int kSmem = FwdF32Smem<kDim>::kBytes;
  auto kernel = fwd_f32_kernel<kDim>;
  set_max_dynamic_smem_once<fwd_f32_kernel<kDim>>(kSmem);
  const int num_qblocks = (params.mask.seqlen_q + C::kBlockQ - 1) / C::kBlockQ;
  FwdParams p = params;
  for (int b0 = 0; b0 < batch; b0 += 65535) {
    p.batch_offset = b0;
    const dim3 grid(num_qblocks, p.heads_q, std::min(batch - b0, 65535));
    kernel<<<grid, C::kWarps * 32, kSmem, stream>>>(p);
  }
}

}  // namespace flash::cuda
