// Backward for f32 inputs with plain f32 FMA (no TF32): the default f32 path.
//
// Two kernels with the layout of the f32 forward, 4 warps of 4 rows per block:
//  - bwd_f32_q:  rows = 16 query rows; key tiles of 32 (one key per lane). Each lane
//    computes s and dP of its key against the warp's rows, then dQ[r][c] += dS·K[key][c]
//    with lane-owned columns (c = lane + 32 t), dS broadcast by shuffles.
//  - bwd_f32_kv: rows = 16 key rows; query tiles of 32 (one query per lane), for each
//    head of the GQA group in turn; dV += P·dO, dK += dS·Q the same way.
// Exponentials in natural units (expf of s·scale − lse), the same operations a naive
// f32 evaluation does; fixed loop orders, so results are bitwise reproducible.
// Tolerance class: f32 (FMA accumulation, relative error ~1e-6).
// Measured (H200, S=1024): 14-17 TFLOP/s, 0.45x torch's f32 memory-efficient backward.
// How to run: bench/RESULTS.md (tests/cuda/device_bwd.sh).
#pragma once

#include <cuda_runtime.h>

#include "bwd_ops.cuh"

namespace flash::cuda {

// Dot products of this warp's kRows tile rows (a, b) with the lane's row of (x, y):
// sa[r] = a[r]·x[lane], sb[r] = b[r]·y[lane].
template <int kDim, int kRows, int RF>
__device__ __forceinline__ void f32_dots(const float* a, const float* b, const float* x,
                                         const float* y, int lane, float (&sa)[kRows],
                                         float (&sb)[kRows]) {
  // Four partial sums per dot (the float4 lanes), added at the end: a quarter of the
  // rounding of one running sum, which matters at large logits (every p's exponent
  // carries the score's rounding).
  float4 pa[kRows], pb[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) pa[r] = pb[r] = make_float4(0.f, 0.f, 0.f, 0.f);
  const float4* xr = reinterpret_cast<const float4*>(x + lane * RF);
  const float4* yr = reinterpret_cast<const float4*>(y + lane * RF);
#pragma unroll 4
  for (int c = 0; c < kDim / 4; ++c) {
    const float4 xv = xr[c], yv = yr[c];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float4 av = reinterpret_cast<const float4*>(a + r * RF)[c];
      const float4 bv = reinterpret_cast<const float4*>(b + r * RF)[c];
      pa[r] = fma4(av, xv, pa[r]);
      pb[r] = fma4(bv, yv, pb[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    sa[r] = (pa[r].x + pa[r].y) + (pa[r].z + pa[r].w);
    sb[r] = (pb[r].x + pb[r].y) + (pb[r].z + pb[r].w);
  }
}

template <int kDim>
__global__ void __launch_bounds__(BwdSimtConfig::kWarps * 32)
    bwd_f32_q_kernel(const BwdParams p, const float* __restrict__ lse,
                     const float* __restrict__ delta, int rows_pad) {
  using C = BwdSimtConfig;
  constexpr int R = C::kRows, BK = C::kTile, kThreads = C::kWarps * 32;
  constexpr int RF = BwdSimtSmem<kDim>::kRowFloats, CT = kDim / 32;
  static_assert(kDim % 32 == 0, "columns split evenly over lanes");
  extern __shared__ __align__(16) float fsmem[];
  float* sQ = fsmem;
  float* sdO = sQ + C::kBlockRows * RF;
  float* sK = sdO + C::kBlockRows * RF;
  float* sV = sK + BK * RF;

  const FwdParams& f = p.f;
  const int head = blockIdx.y;
  const int64_t batch = (int64_t)blockIdx.z + f.batch_offset;
  const int kv_head = head / f.group;
  const SequenceRows seq = sequence_rows(f, batch, head);
  const MaskParams& mask = seq.mask;  // this sequence's lengths (packed batches)
  const int sq = mask.seqlen_q, skv = mask.seqlen_kv;
  const float* q = static_cast<const float*>(f.q) + seq.q + head * f.q_stride[2];
  const float* dout = static_cast<const float*>(p.dout) + seq.o + head * f.o_stride[2];
  const float* k = static_cast<const float*>(f.k) + seq.k + kv_head * f.k_stride[2];
  const float* v = static_cast<const float*>(f.v) + seq.v + kv_head * f.v_stride[2];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * C::kBlockRows;
  if (q0 >= sq) return;  // a packed sequence shorter than the longest: whole block
  const int row0 = q0 + warp * R;
  const KeyRange keys = visible_keys(mask, q0, min(q0 + C::kBlockRows, sq) - 1);
  const ScoreGrad grad(f.scale, f.softcap, 1.f);

  load_f32_tile<C::kBlockRows, kDim, RF, kThreads>(sQ, q, f.q_stride[1], q0, sq, f.head_dim);
  load_f32_tile<C::kBlockRows, kDim, RF, kThreads>(sdO, dout, f.o_stride[1], q0, sq, f.head_dim_v);
  cp_async_commit();
  const int64_t row_base = (batch * f.heads_q + head) * rows_pad + row0;
  float lse_r[R], delta_r[R], acc[R][CT];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    lse_r[r] = lse[row_base + r];
    delta_r[r] = delta[row_base + r];
#pragma unroll
    for (int t = 0; t < CT; ++t) acc[r][t] = 0.f;
  }

  for (int k0 = keys.begin - keys.begin % BK; k0 < keys.end; k0 += BK) {
    __syncthreads();  // everyone is done with the previous K/V tile
    load_f32_tile<BK, kDim, RF, kThreads>(sK, k, f.k_stride[1], k0, skv, f.head_dim);
    load_f32_tile<BK, kDim, RF, kThreads>(sV, v, f.v_stride[1], k0, skv, f.head_dim_v);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    float s[R], dp[R], ds[R];
    f32_dots<kDim, R, RF>(sQ + warp * R * RF, sdO + warp * R * RF, sK, sV, lane, s, dp);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      grad.template operator()<true>(s[r], dp[r], lse_r[r], delta_r[r], ds[r]);
      if (!key_visible(mask, row0 + r, k0 + lane)) ds[r] = 0.f;
    }
    // On tiles that straddle the mask a key the row does not see is skipped, not
    // multiplied by dS = 0: a NaN or inf in its k must not reach the row's dq (0·NaN).
    // Uniform over the warp (one row, all lanes).
    const bool masked = !tile_fully_visible(mask, row0, row0 + R - 1, k0, k0 + BK - 1);
#pragma unroll 8
    for (int j = 0; j < BK; ++j) {
      float kj[CT];
#pragma unroll
      for (int t = 0; t < CT; ++t) kj[t] = sK[j * RF + lane + 32 * t];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float dsj = __shfl_sync(0xffffffffu, ds[r], j);
        if (masked && !key_visible(mask, row0 + r, k0 + j)) continue;
#pragma unroll
        for (int t = 0; t < CT; ++t) acc[r][t] = fmaf(dsj, kj[t], acc[r][t]);
      }
    }
  }
  cp_async_wait<0>();  // rows that see no key never waited for their Q/dO copies

  float* dq = static_cast<float*>(p.dq) + seq.q + head * f.q_stride[2];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (row0 + r >= sq) continue;
    float* dq_row = dq + (int64_t)(row0 + r) * f.q_stride[1];
#pragma unroll
    for (int t = 0; t < CT; ++t)
      if (lane + 32 * t < f.head_dim) dq_row[lane + 32 * t] = acc[r][t] * f.scale;
  }
}

template <int kDim>
__global__ void __launch_bounds__(BwdSimtConfig::kWarps * 32)
    bwd_f32_kv_kernel(const BwdParams p, const float* __restrict__ lse,
                      const float* __restrict__ delta, int rows_pad) {
  using C = BwdSimtConfig;
  constexpr int R = C::kRows, BQ = C::kTile, kThreads = C::kWarps * 32;
  constexpr int RF = BwdSimtSmem<kDim>::kRowFloats, CT = kDim / 32;
  extern __shared__ __align__(16) float fsmem[];
  float* sK = fsmem;
  float* sV = sK + C::kBlockRows * RF;
  float* sQ = sV + C::kBlockRows * RF;
  float* sdO = sQ + BQ * RF;

  const FwdParams& f = p.f;
  const int kv_head = blockIdx.y;
  const int64_t batch = (int64_t)blockIdx.z + f.batch_offset;
  const SequenceRows seq = sequence_rows(f, batch, 0);
  const MaskParams& mask = seq.mask;  // this sequence's lengths (packed batches)
  const int sq = mask.seqlen_q, skv = mask.seqlen_kv;
  const float* k = static_cast<const float*>(f.k) + seq.k + kv_head * f.k_stride[2];
  const float* v = static_cast<const float*>(f.v) + seq.v + kv_head * f.v_stride[2];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = blockIdx.x * C::kBlockRows;
  if (k0 >= skv) return;           // a packed sequence shorter than the longest: whole block
  const int key0 = k0 + warp * R;  // this warp's first key row
  const RowRange rows = bwd_visible_rows(mask, k0, min(k0 + C::kBlockRows, skv) - 1);
  const ScoreGrad grad(f.scale, f.softcap, 1.f);

  load_f32_tile<C::kBlockRows, kDim, RF, kThreads>(sK, k, f.k_stride[1], k0, skv, f.head_dim);
  load_f32_tile<C::kBlockRows, kDim, RF, kThreads>(sV, v, f.v_stride[1], k0, skv, f.head_dim_v);
  cp_async_commit();
  float acc_dk[R][CT], acc_dv[R][CT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < CT; ++t) acc_dk[r][t] = acc_dv[r][t] = 0.f;

  for (int i = 0; i < f.group; ++i) {
    const int head = kv_head * f.group + i;
    const float* q = static_cast<const float*>(f.q) + seq.q + head * f.q_stride[2];
    const float* dout = static_cast<const float*>(p.dout) + seq.o + head * f.o_stride[2];
    const int64_t row_base = (batch * f.heads_q + head) * rows_pad;
    for (int q0 = rows.begin - rows.begin % BQ; q0 < rows.end; q0 += BQ) {
      __syncthreads();  // everyone is done with the previous Q/dO tile
      load_f32_tile<BQ, kDim, RF, kThreads>(sQ, q, f.q_stride[1], q0, sq, f.head_dim);
      load_f32_tile<BQ, kDim, RF, kThreads>(sdO, dout, f.o_stride[1], q0, sq, f.head_dim_v);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
      // q0 + lane < rows_pad: q0 < seqlen_q <= rows_pad, both multiples of 32.
      const float lse_q = lse[row_base + q0 + lane], delta_q = delta[row_base + q0 + lane];
      float s[R], dp[R], pr[R], ds[R];
      f32_dots<kDim, R, RF>(sK + warp * R * RF, sV + warp * R * RF, sQ, sdO, lane, s, dp);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        pr[r] = grad.template operator()<true>(s[r], dp[r], lse_q, delta_q, ds[r]);
        if (!key_visible(mask, q0 + lane, key0 + r)) pr[r] = ds[r] = 0.f;
      }
#pragma unroll 4
      for (int j = 0; j < BQ; ++j) {
        float qj[CT], doj[CT];
#pragma unroll
        for (int t = 0; t < CT; ++t) {
          qj[t] = sQ[j * RF + lane + 32 * t];
          doj[t] = sdO[j * RF + lane + 32 * t];
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float pj = __shfl_sync(0xffffffffu, pr[r], j);
          const float dsj = __shfl_sync(0xffffffffu, ds[r], j);
#pragma unroll
          for (int t = 0; t < CT; ++t) {
            acc_dv[r][t] = fmaf(pj, doj[t], acc_dv[r][t]);
            acc_dk[r][t] = fmaf(dsj, qj[t], acc_dk[r][t]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();  // keys that no row sees never waited for their K/V copies

  float* dk = static_cast<float*>(p.dk) + seq.k + kv_head * f.k_stride[2];
  float* dv = static_cast<float*>(p.dv) + seq.v + kv_head * f.v_stride[2];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = key0 + r;
    if (row >= skv) continue;
#pragma unroll
    for (int t = 0; t < CT; ++t) {
      const int col = lane + 32 * t;
      if (col < f.head_dim) dk[(int64_t)row * f.k_stride[1] + col] = acc_dk[r][t] * f.scale;
      if (col < f.head_dim_v) dv[(int64_t)row * f.v_stride[1] + col] = acc_dv[r][t];
    }
  }
}

template <int kDim>
void launch_bwd_f32(const BwdParams& params, int batch, const float* lse, const float* delta,
                    int rows_pad, cudaStream_t stream) {
  using C = BwdSimtConfig;
  constexpr int kSmem = BwdSimtSmem<kDim>::kBytes;
  auto q_kernel = bwd_f32_q_kernel<kDim>;
  auto kv_kernel = bwd_f32_kv_kernel<kDim>;
  cudaFuncSetAttribute(q_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  cudaFuncSetAttribute(kv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  const int q_blocks = (params.f.mask.seqlen_q + C::kBlockRows - 1) / C::kBlockRows;
  const int kv_blocks = (params.f.mask.seqlen_kv + C::kBlockRows - 1) / C::kBlockRows;
  BwdParams p = params;
  for (int b0 = 0; b0 < batch; b0 += 65535) {  // gridDim.z is at most 65535
    p.f.batch_offset = b0;
    const int nb = std::min(batch - b0, 65535);
    kv_kernel<<<dim3(kv_blocks, p.heads_kv, nb), C::kWarps * 32, kSmem, stream>>>(p, lse, delta,
                                                                                  rows_pad);
    q_kernel<<<dim3(q_blocks, p.f.heads_q, nb), C::kWarps * 32, kSmem, stream>>>(p, lse, delta,
                                                                                 rows_pad);
  }
}

}  // namespace flash::cuda
