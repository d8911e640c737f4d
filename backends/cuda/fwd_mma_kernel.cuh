// Forward attention on tensor cores (f16 / bf16 inputs, f32 accumulation).
//
// Algorithm (FlashAttention-2): one block per (query tile, head, batch). Each warp owns
// 16 or 32 whole query rows, so its slice of O and the softmax state (row max m, row sum
// l) live in its registers and no cross-warp reduction is needed. For each visible K/V
// tile: S = Q·Kᵀ with mma.sync m16n8k16 (ldmatrix from swizzled shared memory), online
// softmax with exp2 (log2(e) folded into the scale; exponents (s - max)·scale·log2e,
// exact at any logit size), then P — re-packed from the S
// accumulators into A fragments without leaving registers — times V (ldmatrix.trans).
// O is divided by l once at the end; lse = ln(sum exp) is written when asked.
// Pipelining: cp.async brings V(j) while S(j) and the softmax run, and K(j+1) while P·V(j)
// runs. Tiles outside the causal/window band are never visited; only tiles that straddle
// a mask boundary (or the end of the keys) pay for per-element masking.
//
// Tolerance class: f32 accumulation everywhere; P is rounded to the input dtype before
// P·V (as FlashAttention does), well inside the 2x-naive-in-dtype rule.
// Measured (H200, bf16, FlashAttention shapes, S = 1k..16k, 2026-11-21): D = 64 291-326
// TFLOP/s (1.04-1.07x torch SDPA flash), D = 128 332-377 (1.03-1.09x); causal 1.03-1.13x.
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

#ifndef FLASH_FWD_LAZY_RESCALE
#define FLASH_FWD_LAZY_RESCALE 1  // tuning builds may set 0 to compare
#endif

namespace flash::cuda {

// kSequences: packed batches or cache lengths (sequence.cuh). A dense launch keeps the
// mask and offsets in parameter space: the per-sequence copy costs registers this
// kernel does not have (172 bytes of spills at D = 128, 7-8% of its speed).
template <class T, class C, bool kSequences>
__global__ void __launch_bounds__(FwdMmaDerived<C>::kThreads, 1) fwd_mma_kernel(const FwdParams p) {
  using Dv = FwdMmaDerived<C>;
  constexpr int D = C::kDim, BQ = C::kBlockQ, BK = C::kBlockKV;
  constexpr int kThreads = Dv::kThreads, MT = Dv::kMTiles, kChunks = Dv::kChunks;
  constexpr int NT = BK / 8;  // n8 tiles of S per m-tile
  constexpr int OT = D / 8;   // n8 tiles of O per m-tile
  constexpr bool kLazyRescale = FLASH_FWD_LAZY_RESCALE && D >= 128;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = smem_addr(smem);
  const uint32_t sK = sQ + BQ * D * 2;
  const uint32_t sV = sK + BK * D * 2;

  const int num_qblocks = gridDim.x;
  // Causal/banded blocks late in the sequence carry the most tiles: start them first.
  const int qblock = p.mask.bounded ? num_qblocks - 1 - blockIdx.x : blockIdx.x;
  const int head = blockIdx.y;
  const int64_t batch = (int64_t)blockIdx.z + p.batch_offset;
  const int kv_head = head / p.group;
  const SequenceRows seq = kSequences ? sequence_rows(p, batch, head) : dense_rows(p, batch, head);
  const MaskParams& mask = kSequences ? seq.mask : p.mask;  // this sequence's lengths
  const int sq = mask.seqlen_q, skv = mask.seqlen_kv;

  const T* q = static_cast<const T*>(p.q) + seq.q + head * p.q_stride[2];
  const T* k = static_cast<const T*>(p.k) + seq.k + kv_head * p.k_stride[2];
  const T* v = static_cast<const T*>(p.v) + seq.v + kv_head * p.v_stride[2];
  T* o = static_cast<T*>(p.o) + seq.o + head * p.o_stride[2];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, tig = lane % 4;  // mma fragment row group / thread in group
  const int q0 = qblock * BQ;
  if (q0 >= sq) return;  // a packed sequence shorter than the launch's longest: whole block
  const int q_last = min(q0 + BQ, sq) - 1;
  const KeyRange keys = visible_keys(mask, q0, q_last);
  const int tile_begin = keys.begin / BK;
  const int tile_end = keys.end > keys.begin ? (keys.end + BK - 1) / BK : tile_begin;

  const int warp_row0 = warp * Dv::kRowsPerWarp;  // within the block
  // ldmatrix lane patterns (see LdsmAddr): Q as A operand, K as B operand, V as B
  // operand through the transposed load.
  const LdsmAddr<kChunks> q_addr(sQ + warp_row0 * kChunks * 16, lane & 15, lane >> 4);
  const LdsmAddr<kChunks> k_addr(sK, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const LdsmAddr<kChunks> v_addr(sV, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);

  // Softcap replaces s*scale by softcap*tanh(s*scale/softcap); the exp2 multiplier
  // then applies to the capped score. Either way p = exp2((score - max)*mult)
  // (online_softmax_max in fwd_tile_ops.cuh says why not the one-FFMA form).
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
    __syncthreads();  // K(tile) visible to all; every warp is done with V(tile-1)
    load_tile_async<BK, kChunks, kThreads>(sV, v, p.v_stride[1], k0, skv, p.head_dim_v);
    cp_async_commit();

    // ---- S = Q·Kᵀ -------------------------------------------------------------------
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

    // ---- softcap, mask, online softmax ----------------------------------------------
    const bool masked = !tile_fully_visible(mask, q0, q_last, k0, k0 + BK - 1);
    softcap_and_mask(s, p.softcap, mask, use_softcap, cap_in, masked, q0 + warp_row0 + g,
                     k0 + tig * 2);
    float row_alpha[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = row_half_max(s[mt], h);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float max_used, alpha;
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
        row_sum[mt][h] = row_sum[mt][h] * alpha + sum;  // per-thread partial; reduced at end
        row_alpha[mt][h] = alpha;
      }
    }
    // Rescale O only when some row max of this warp moved (alpha != 1): after the first
    // tiles a new maximum is rare, and the multiply costs MT*D/2 FMULs per thread.
    // Measured: +2-6% at D=256, +1% at D=128, -2% at D=64 (the vote costs more than
    // the few FMULs it saves), hence only for D >= 128.
    rescale_o<kLazyRescale>(acc_o, row_alpha);

    // P in the input dtype, already laid out as the A operand of P·V: the accumulators
    // of S tiles 2kk and 2kk+1 (columns 16kk..16kk+15) form A fragment kk.
    uint32_t p_frag[MT][BK / 16][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        p_frag[mt][kk][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        p_frag[mt][kk][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        p_frag[mt][kk][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        p_frag[mt][kk][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }

    cp_async_wait<0>();
    // V(tile) visible; every warp is done reading K(tile). A boundary tile whose V holds
    // a NaN or inf takes the exact path (fwd_tile_ops.cuh).
    const bool exact_pv =
        __syncthreads_or(masked && own_chunks_nonfinite<BK, kChunks, kThreads, T>(sV));
    if (tile + 1 < tile_end) {
      load_tile_async<BK, kChunks, kThreads>(sK, k, p.k_stride[1], k0 + BK, skv, p.head_dim);
    }
    cp_async_commit();

    // ---- O += P·V ---------------------------------------------------------------------
    if (exact_pv) {
      const auto frag = [&](int mt, int kk, int reg, int src) {
        return __shfl_sync(0xffffffffu, p_frag[mt][kk][reg], src);
      };
      const auto v_chunk = [&](int key, int chunk) { return tile_addr<kChunks>(sV, key, chunk); };
      pv_visible_keys_only<T, MT, BK / 16, OT>(acc_o, frag, v_chunk, mask, q0 + warp_row0 + g, k0);
      continue;
    }
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
      for (int nt2 = 0; nt2 < OT / 2; ++nt2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_addr(kk * 16, nt2 * 2));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(acc_o[mt][2 * nt2], p_frag[mt][kk], b[0], b[1]);
          mma_16816<T>(acc_o[mt][2 * nt2 + 1], p_frag[mt][kk], b[2], b[3]);
        }
      }
    }
  }

  // ---- normalise, store O and lse -----------------------------------------------------
  // O goes through this warp's own rows of the Q tile (no other warp reads them, and no
  // copy into them is pending), then out as 16-byte row-contiguous stores.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l == 0.f ? 0.f : 1.f / l;  // rows that see no key: o = 0
      const int r = warp_row0 + mt * 16 + g + h * 8;
#pragma unroll
      for (int nt = 0; nt < OT; ++nt) {
        const uint32_t v2 = pack2<T>(acc_o[mt][nt][2 * h] * inv, acc_o[mt][nt][2 * h + 1] * inv);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile_addr<kChunks>(sQ, r, nt) + tig * 4),
                     "r"(v2)
                     : "memory");
      }
      const int row = q0 + r;
      if (p.lse != nullptr && tig == 0 && row < sq) {
        p.lse[seq.lse + row] = row_lse(row_max[mt][h], l, mult);
      }
    }
  }
  __syncwarp();
  constexpr int kWarpChunks = Dv::kRowsPerWarp * kChunks;
#pragma unroll
  for (int it = 0; it < (kWarpChunks + 31) / 32; ++it) {
    const int idx = it * 32 + lane;
    const int r = idx / kChunks, c = idx % kChunks;
    const int row = q0 + warp_row0 + r;
    if (idx < kWarpChunks && row < sq && c * 8 < p.head_dim_v) {
      uint4 val;
      asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                   : "r"(tile_addr<kChunks>(sQ, warp_row0 + r, c))
                   : "memory");
      *reinterpret_cast<uint4*>(o + (int64_t)row * p.o_stride[1] + c * 8) = val;
    }
  }
}

template <class T, class C>
void launch_fwd_mma(const FwdParams& params, int batch, cudaStream_t stream) {
  using Dv = FwdMmaDerived<C>;
  const bool sequences = params.cu_seqlens_q || params.cu_seqlens_kv || params.seqlens_kv;
  auto kernel = sequences ? fwd_mma_kernel<T, C, true> : fwd_mma_kernel<T, C, false>;
  set_max_dynamic_smem_once<fwd_mma_kernel<T, C, true>>(Dv::kSmemBytes);
  set_max_dynamic_smem_once<fwd_mma_kernel<T, C, false>>(Dv::kSmemBytes);
  const int num_qblocks = (params.mask.seqlen_q + C::kBlockQ - 1) / C::kBlockQ;
  FwdParams p = params;
  for (int b0 = 0; b0 < batch; b0 += 65535) {  // gridDim.z is at most 65535
    p.batch_offset = b0;
    const dim3 grid(num_qblocks, p.heads_q, std::min(batch - b0, 65535));
    kernel<<<grid, Dv::kThreads, Dv::kSmemBytes, stream>>>(p);
  }
}

}  // namespace flash::cuda
