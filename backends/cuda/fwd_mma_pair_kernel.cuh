// Forward attention on tensor cores for head dims 128 and 256 (f16 / bf16, f32
// accumulation): the FlashAttention-2 algorithm of fwd_mma_kernel.cuh with warps
// working in pairs.
//
// Why: at D = 256 a warp cannot hold O for 32 query rows (256 f32 registers), so the
// plain kernel gives each warp 16 rows, and every K/V fragment read from shared memory
// feeds one mma: shared-memory bandwidth, not the tensor cores, sets the pace. Here two
// warps share 16 * m-tiles rows: warp `half` computes S = Q·Kᵀ for its half of the key tile (full
// head dim) and owns O for its half of the value columns. Per tile the pair trades row
// maxima (then both use the same running max, so their partial row sums add up) and
// their halves of P, already packed as mma A fragments, through shared memory (named
// barrier per pair). Each K/V fragment then feeds all m16 tiles of the pair: at D = 256
// with 2 m-tiles about 30% fewer shared-memory bytes per mma than 16 rows per warp.
// Otherwise as fwd_mma_kernel.cuh: cp.async K/V overlap, exp2 with log2(e) folded in,
// masks only on boundary tiles, lazy O rescale, O normalised once and stored through
// shared memory.
// Tolerance class: as fwd_mma_kernel.cuh (f32 accumulation, P rounded to the dtype).
// Measured (H200, bf16, D = 256, S = 1k..16k, 2026-11-21): 310-333 TFLOP/s, 1.02-1.04x
// torch SDPA flash (causal 1.02-1.21x); +6-7% over the plain kernel in the same call.
// Tables: bench/RESULTS.md. Run: tests/cuda/device_run.sh (check, bench).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "device_ops.cuh"
#include "fwd_tile_ops.cuh"
#include "kernel_params.hpp"
#include "mask.cuh"
#include "sequence.cuh"
#include "tile_configs.hpp"

namespace flash::cuda {

// Barrier of the two warps of `pair` (ids 1.., 0 is __syncthreads). Immediate ids, so
// the compiler reserves only the barriers used.
template <int kPairs>
__device__ __forceinline__ void pair_barrier(int pair) {
  static_assert(kPairs <= 2, "add cases for more pairs");
  if (pair == 0) {
    asm volatile("bar.sync 1, 64;\n" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 64;\n" ::: "memory");
  }
}

template <class T, class C>
__global__ void __launch_bounds__(FwdPairDerived<C>::kThreads, 1)
    fwd_mma_pair_kernel(const FwdParams p) {
  using Dv = FwdPairDerived<C>;
  constexpr int D = C::kDim, BQ = C::kBlockQ, BK = C::kBlockKV;
  constexpr int kThreads = Dv::kThreads, kChunks = Dv::kChunks;
  constexpr int MT = Dv::kMTiles;  // m16 tiles of the pair's rows
  constexpr int PR = Dv::kPairRows;
  constexpr int NT = BK / 2 / 8;    // n8 tiles of S per warp (its half of the keys)
  constexpr int KTH = BK / 2 / 16;  // k16 steps of P·V per key half
  constexpr int OT = D / 2 / 8;     // n8 tiles of O per warp (its half of the columns)

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = smem_addr(smem);
  const uint32_t sK = sQ + BQ * D * 2;
  const uint32_t sV = sK + BK * D * 2;
  uint4* x_p = reinterpret_cast<uint4*>(smem + (BQ + 2 * BK) * D * 2);       // [warp][MT][KTH][32]
  float* x_row = reinterpret_cast<float*>(x_p + C::kWarps * MT * KTH * 32);  // [warp][PR]

  const int num_qblocks = gridDim.x;
  const int qblock = p.mask.bounded ? num_qblocks - 1 - blockIdx.x : blockIdx.x;
  const int head = blockIdx.y;
  const int64_t batch = (int64_t)blockIdx.z + p.batch_offset;
  const int kv_head = head / p.group;
  const SequenceRows seq = sequence_rows(p, batch, head);
  const MaskParams& mask = seq.mask;  // this sequence's lengths (packed batches, caches)
  const int sq = mask.seqlen_q, skv = mask.seqlen_kv;
  const T* q = static_cast<const T*>(p.q) + seq.q + head * p.q_stride[2];
  const T* k = static_cast<const T*>(p.k) + seq.k + kv_head * p.k_stride[2];
  const T* v = static_cast<const T*>(p.v) + seq.v + kv_head * p.v_stride[2];
  T* o = static_cast<T*>(p.o) + seq.o + head * p.o_stride[2];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, tig = lane % 4;
  const int pair = warp / 2, half = warp % 2, partner = warp ^ 1;
  const int q0 = qblock * BQ;
  if (q0 >= sq) return;  // a packed sequence shorter than the launch's longest: whole block
  const int q_last = min(q0 + BQ, sq) - 1;
  const KeyRange keys = visible_keys(mask, q0, q_last);
  const int tile_begin = keys.begin / BK;
  const int tile_end = keys.end > keys.begin ? (keys.end + BK - 1) / BK : tile_begin;
  const int pair_row0 = pair * PR;

  const LdsmAddr<kChunks> q_addr(sQ + pair_row0 * kChunks * 16, lane & 15, lane >> 4);
  const LdsmAddr<kChunks> k_addr(sK + half * (BK / 2) * kChunks * 16,
                                 (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  // This warp's value columns start at chunk half * D/16, a multiple of 8 for D = 256
  // (static_assert in FwdPairDerived), so the swizzle pattern is the same for both.
  const LdsmAddr<kChunks> v_addr(sV + half * (D / 16) * 16, (lane & 7) + (((lane >> 3) & 1) << 3),
                                 lane >> 4);

  const bool use_softcap = p.softcap > 0.f;
  const float mult = use_softcap ? kLog2e : p.scale * kLog2e;
  const float cap_in = use_softcap ? p.scale / p.softcap : 0.f;

  float acc_o[MT][OT][4];
  float row_max[MT][2], row_sum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_max[mt][h] = -INFINITY;
      row_sum[mt][h] = 0.f;
    }
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][nt][e] = 0.f;
  }

  if (tile_begin < tile_end) {
    load_tile_async<BQ, kChunks, kThreads>(sQ, q, p.q_stride[1], q0, sq, p.head_dim);
    load_tile_async<BK, kChunks, kThreads>(sK, k, p.k_stride[1], tile_begin * BK, skv, p.head_dim);
    cp_async_commit();
  }

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int k0 = tile * BK;
    cp_async_wait<0>();
    __syncthreads();  // K(tile) visible; every warp is done with V(tile-1) and the
                      // exchange buffers of tile-1
    load_tile_async<BK, kChunks, kThreads>(sV, v, p.v_stride[1], k0, skv, p.head_dim_v);
    cp_async_commit();

    // ---- S = Q·Kᵀ for this warp's half of the keys -----------------------------------
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], q_addr(mt * 16, kk * 2));
#pragma unroll
      for (int nt2 = 0; nt2 < NT / 2; ++nt2) {
        uint32_t b[4];
        ldmatrix_x4(b, k_addr(nt2 * 16, kk * 2));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(s[mt][2 * nt2], a[mt], b[0], b[1]);
          mma_16816<T>(s[mt][2 * nt2 + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // ---- softcap, mask --------------------------------------------------------------
    const bool masked = !tile_fully_visible(mask, q0, q_last, k0, k0 + BK - 1);
    softcap_and_mask(s, p.softcap, mask, use_softcap, cap_in, masked, q0 + pair_row0 + g,
                     k0 + half * (BK / 2) + tig * 2);

    // ---- row max over both halves (exchange), then P and partial row sums ------------
    float tile_max[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = row_half_max(s[mt], h);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        tile_max[mt][h] = mx;
        if (tig == 0) x_row[warp * PR + mt * 16 + h * 8 + g] = mx;
      }
    pair_barrier<C::kWarps / 2>(pair);
    float row_alpha[MT][2];
    uint32_t p_own[MT][KTH][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mx = fmaxf(tile_max[mt][h], x_row[partner * PR + mt * 16 + h * 8 + g]);
        float max_used, alpha;  // both warps of the pair compute the same max
        online_softmax_max(row_max[mt][h], mx, mult, max_used, alpha);
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const float p0 = softmax_p(s[mt][nt][2 * h], max_used, mult);
          const float p1 = softmax_p(s[mt][nt][2 * h + 1], max_used, mult);
          s[mt][nt][2 * h] = p0;
          s[mt][nt][2 * h + 1] = p1;
          sum += p0 + p1;
        }
        row_sum[mt][h] = row_sum[mt][h] * alpha + sum;  // this half's keys only
        row_alpha[mt][h] = alpha;
      }
#pragma unroll
      for (int kk = 0; kk < KTH; ++kk) {
        p_own[mt][kk][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        p_own[mt][kk][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        p_own[mt][kk][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        p_own[mt][kk][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        x_p[((warp * MT + mt) * KTH + kk) * 32 + lane] =
            make_uint4(p_own[mt][kk][0], p_own[mt][kk][1], p_own[mt][kk][2], p_own[mt][kk][3]);
      }
    }
    rescale_o<true>(acc_o, row_alpha);

    cp_async_wait<0>();
    // V(tile) visible; every warp is done with K(tile); P halves written. A boundary tile
    // whose V holds a NaN or inf takes the exact path (fwd_tile_ops.cuh).
    const bool exact_pv =
        __syncthreads_or(masked && own_chunks_nonfinite<BK, kChunks, kThreads, T>(sV));
    if (tile + 1 < tile_end)
      load_tile_async<BK, kChunks, kThreads>(sK, k, p.k_stride[1], k0 + BK, skv, p.head_dim);
    cp_async_commit();
    if (exact_pv) {
#pragma unroll
      for (int src = 0; src < 2; ++src) {  // both key halves from the exchange buffers
        const int w = src == 0 ? warp : partner, key_half = src == 0 ? half : 1 - half;
        const auto frag = [&](int mt, int kk, int reg, int lane_src) {
          const uint4 t = x_p[((w * MT + mt) * KTH + kk) * 32 + lane_src];
          return reg == 0 ? t.x : reg == 1 ? t.y : reg == 2 ? t.z : t.w;
        };
        const auto v_chunk = [&](int key, int chunk) {
          return tile_addr<kChunks>(sV, key_half * (BK / 2) + key, half * (D / 16) + chunk);
        };
        pv_visible_keys_only<T, MT, KTH, OT>(acc_o, frag, v_chunk, mask, q0 + pair_row0 + g,
                                             k0 + key_half * (BK / 2));
      }
      continue;
    }

    // ---- O(columns of this half) += P(all keys)·V -----------------------------------
#pragma unroll
    for (int src = 0; src < 2; ++src) {  // 0: own key half (registers), 1: partner's
      const int key_half = src == 0 ? half : 1 - half;
#pragma unroll
      for (int kk = 0; kk < KTH; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if (src == 0) {
#pragma unroll
            for (int e = 0; e < 4; ++e) a[mt][e] = p_own[mt][kk][e];
          } else {
            const uint4 t = x_p[((partner * MT + mt) * KTH + kk) * 32 + lane];
            a[mt][0] = t.x;
            a[mt][1] = t.y;
            a[mt][2] = t.z;
            a[mt][3] = t.w;
          }
        }
        const int key_row0 = key_half * (BK / 2) + kk * 16;
#pragma unroll
        for (int nt2 = 0; nt2 < OT / 2; ++nt2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, v_addr(key_row0, nt2 * 2));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_16816<T>(acc_o[mt][2 * nt2], a[mt], b[0], b[1]);
            mma_16816<T>(acc_o[mt][2 * nt2 + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }
  }

  // ---- row sums of both halves, normalise, store O (this half's columns) and lse -----
  __syncthreads();  // the exchange buffers are free (all warps past their last P·V)
  float l_own[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      l_own[mt][h] = l;
      if (tig == 0) x_row[warp * PR + mt * 16 + h * 8 + g] = l;
    }
  pair_barrier<C::kWarps / 2>(pair);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = l_own[mt][h] + x_row[partner * PR + mt * 16 + h * 8 + g];
      const float inv = l == 0.f ? 0.f : 1.f / l;
      const int r = pair_row0 + mt * 16 + g + h * 8;
#pragma unroll
      for (int nt = 0; nt < OT; ++nt) {
        const uint32_t v2 = pack2<T>(acc_o[mt][nt][2 * h] * inv, acc_o[mt][nt][2 * h + 1] * inv);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(
                         tile_addr<kChunks>(sQ, r, half * (D / 16) + nt) + tig * 4),
                     "r"(v2)
                     : "memory");
      }
      const int row = q0 + r;
      if (p.lse != nullptr && half == 0 && tig == 0 && row < sq) {
        p.lse[seq.lse + row] = row_lse(row_max[mt][h], l, mult);
      }
    }
  }
  __syncwarp();
  constexpr int kHalfChunks = D / 16;
  constexpr int kWarpChunks = PR * kHalfChunks;
#pragma unroll
  for (int it = 0; it < (kWarpChunks + 31) / 32; ++it) {
    const int idx = it * 32 + lane;
    const int r = idx / kHalfChunks, c = half * kHalfChunks + idx % kHalfChunks;
    const int row = q0 + pair_row0 + r;
    if (idx < kWarpChunks && row < sq && c * 8 < p.head_dim_v) {
      uint4 val;
      asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                   : "r"(tile_addr<kChunks>(sQ, pair_row0 + r, c))
                   : "memory");
      *reinterpret_cast<uint4*>(o + (int64_t)row * p.o_stride[1] + c * 8) = val;
    }
  }
}

template <class T, class C>
void launch_fwd_mma_pair(const FwdParams& params, int batch, cudaStream_t stream) {
  using Dv = FwdPairDerived<C>;
  set_max_dynamic_smem_once<fwd_mma_pair_kernel<T, C>>(Dv::kSmemBytes);
  const int num_qblocks = (params.mask.seqlen_q + C::kBlockQ - 1) / C::kBlockQ;
  FwdParams p = params;
  for (int b0 = 0; b0 < batch; b0 += 65535) {
    p.batch_offset = b0;
    const dim3 grid(num_qblocks, p.heads_q, std::min(batch - b0, 65535));
    fwd_mma_pair_kernel<T, C><<<grid, Dv::kThreads, Dv::kSmemBytes, stream>>>(p);
  }
}

}  // namespace flash::cuda
