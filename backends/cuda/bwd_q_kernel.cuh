// Backward, dQ on tensor cores (f16 / bf16 inputs, f32 accumulation), deterministic.
//
// Algorithm: one block per (query tile, head, batch), each warp owning 16·kMTiles rows
// (the forward's layout). Q and dO of the tile stay in shared memory; for each key
// tile that the rows see (K and V brought by cp.async one stage ahead):
//   S = Q·Kᵀ, dP = dO·Vᵀ                      (mma.sync m16n8k16)
//   P = exp2(S·scale·log2e − lse·log2e), dS = P∘(dP − Δ)   (softcap: as in bwd_ops)
//   dQ += dS·K                                (dS re-packed as A fragments, K by
//                                              ldmatrix.trans)
// dQ lives in f32 registers and is written once, times scale, in the output dtype:
// no f32 accumulator in global memory, no atomics, so the result is bitwise the same
// every run. The price is recomputing S and dP (3 products here plus 4 in bwd_kv,
// against FlashAttention-2's 5 with atomics).
//
// Tolerance class: f32 accumulation; dS rounded to the input dtype before dS·K.
// Measured: see bwd_kv_kernel.cuh (the two run back to back; dQ takes ~45% of the time).
// How to run: bench/RESULTS.md (tests/cuda/device_bwd.sh).
#pragma once

#include <cuda_runtime.h>

#include "bwd_ops.cuh"

namespace flash::cuda {

template <class T, class C>
__global__ void __launch_bounds__(BwdQDerived<C>::kThreads, C::kMinBlocks)
    bwd_q_kernel(const BwdParams p, const float* __restrict__ lse2, const float* __restrict__ delta,
                 int rows_pad) {
  using Dv = BwdQDerived<C>;
  constexpr int D = C::kDim, BQ = C::kBlockQ, BK = C::kBlockKV, MT = C::kMTiles;
  constexpr int kThreads = Dv::kThreads, kChunks = Dv::kChunks;
  constexpr int NT = BK / 8;   // n8 tiles of S per warp
  constexpr int OT = D / 8;    // n8 tiles of dQ per warp
  constexpr int KS = BK / 16;  // k16 steps of dS·K
  constexpr int kTileKv = Dv::kTileKvBytes, kStage = Dv::kStageBytes;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = smem_addr(smem);
  const uint32_t sdO = sQ + BQ * D * 2;
  const uint32_t sStage = sdO + BQ * D * 2;  // stage s: K tile, V tile

  const FwdParams& f = p.f;
  const int num_qblocks = gridDim.x;
  // Banded blocks late in the sequence carry the most key tiles: start them first.
  const int qblock = f.mask.bounded ? num_qblocks - 1 - blockIdx.x : blockIdx.x;
  const int head = blockIdx.y;
  const int64_t batch = (int64_t)blockIdx.z + f.batch_offset;
  const int kv_head = head / f.group;
  const int sq = f.mask.seqlen_q, skv = f.mask.seqlen_kv;

  const T* q = static_cast<const T*>(f.q) + batch * f.q_stride[0] + head * f.q_stride[2];
  const T* dout = static_cast<const T*>(p.dout) + batch * f.o_stride[0] + head * f.o_stride[2];
  const T* k = static_cast<const T*>(f.k) + batch * f.k_stride[0] + kv_head * f.k_stride[2];
  const T* v = static_cast<const T*>(f.v) + batch * f.v_stride[0] + kv_head * f.v_stride[2];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, tig = lane % 4;
  const int q0 = qblock * BQ;
  const int q_last = min(q0 + BQ, sq) - 1;
  const int qw0 = q0 + warp * 16 * MT;  // this warp's first row
  const KeyRange keys = visible_keys(f.mask, q0, q_last);
  const int tile_begin = keys.begin / BK;
  const int tile_end = keys.end > keys.begin ? (keys.end + BK - 1) / BK : tile_begin;

  // Q/dO rows as A operand; K/V as B operand (plain for S, dP; transposed for dS·K).
  const LdsmAddr<kChunks> q_a(sQ + warp * 16 * MT * kChunks * 16, lane & 15, lane >> 4);
  const LdsmAddr<kChunks> k_b(sStage, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const LdsmAddr<kChunks> k_t(sStage, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);

  const ScoreGrad grad(f.scale, f.softcap, kBwdLog2e);
  // lse·log2e and Δ of the rows (g, g + 8 of each m-tile) this thread holds; rows are
  // padded to whole tiles.
  const int64_t row_base = (batch * f.heads_q + head) * rows_pad + qw0 + g;
  float lse_r[MT][2], delta_r[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      lse_r[mt][h] = lse2[row_base + mt * 16 + h * 8];
      delta_r[mt][h] = delta[row_base + mt * 16 + h * 8];
    }

  auto load_kv = [&](int tile, int stage) {
    const uint32_t st = sStage + stage * kStage;
    load_tile_async<BK, kChunks, kThreads>(st, k, f.k_stride[1], tile * BK, skv, f.head_dim);
    load_tile_async<BK, kChunks, kThreads>(st + kTileKv, v, f.v_stride[1], tile * BK, skv,
                                           f.head_dim_v);
  };

  float acc[MT][OT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;

  if (tile_begin < tile_end) {
    load_tile_async<BQ, kChunks, kThreads>(sQ, q, f.q_stride[1], q0, sq, f.head_dim);
    load_tile_async<BQ, kChunks, kThreads>(sdO, dout, f.o_stride[1], q0, sq, f.head_dim_v);
    load_kv(tile_begin, 0);
    cp_async_commit();
  }

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int stage = (tile - tile_begin) & 1;
    const int k0 = tile * BK;
    cp_async_wait<0>();
    __syncthreads();  // this stage visible; every warp is done with the other one
    if (tile + 1 < tile_end) load_kv(tile + 1, stage ^ 1);
    cp_async_commit();

    // A warp whose rows see no key of this tile skips it (causal diagonal).
    const KeyRange wkeys = visible_keys(f.mask, qw0, qw0 + 16 * MT - 1);
    if (wkeys.end <= k0 || wkeys.begin >= k0 + BK || wkeys.end <= wkeys.begin) continue;
    const uint32_t st = stage * kStage;

    // ---- S = Q·Kᵀ and dP = dO·Vᵀ -------------------------------------------------------
    float s[MT][NT][4], dp[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[mt][nt][e] = 0.f;
          dp[mt][nt][e] = 0.f;
        }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t aq[MT][4], ado[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ldmatrix_x4(aq[mt], q_a(mt * 16, kk * 2));
        ldmatrix_x4(ado[mt], q_a(mt * 16, kk * 2) + BQ * D * 2);
      }
#pragma unroll
      for (int nt2 = 0; nt2 < NT / 2; ++nt2) {
        uint32_t b[4];
        ldmatrix_x4(b, k_b(nt2 * 16, kk * 2) + st);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(s[mt][2 * nt2], aq[mt], b[0], b[1]);
          mma_16816<T>(s[mt][2 * nt2 + 1], aq[mt], b[2], b[3]);
        }
        ldmatrix_x4(b, k_b(nt2 * 16, kk * 2) + st + kTileKv);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(dp[mt][2 * nt2], ado[mt], b[0], b[1]);
          mma_16816<T>(dp[mt][2 * nt2 + 1], ado[mt], b[2], b[3]);
        }
      }
    }

    // ---- dS (accumulator rows = queries, columns = keys) ------------------------------
    const bool full = tile_fully_visible(f.mask, qw0, qw0 + 16 * MT - 1, k0, k0 + BK - 1);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float ds;
          grad.template operator()<false>(s[mt][nt][e], dp[mt][nt][e], lse_r[mt][e >> 1],
                                          delta_r[mt][e >> 1], ds);
          if (!full) {
            const int row = qw0 + mt * 16 + g + (e >= 2 ? 8 : 0);
            const int key = k0 + nt * 8 + tig * 2 + (e & 1);
            if (!key_visible(f.mask, row, key)) ds = 0.f;
          }
          dp[mt][nt][e] = ds;
        }
    uint32_t df[MT][KS][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        df[mt][kk][0] = pack2<T>(dp[mt][2 * kk][0], dp[mt][2 * kk][1]);
        df[mt][kk][1] = pack2<T>(dp[mt][2 * kk][2], dp[mt][2 * kk][3]);
        df[mt][kk][2] = pack2<T>(dp[mt][2 * kk + 1][0], dp[mt][2 * kk + 1][1]);
        df[mt][kk][3] = pack2<T>(dp[mt][2 * kk + 1][2], dp[mt][2 * kk + 1][3]);
      }

      // ---- dQ += dS·K ---------------------------------------------------------------------
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
      for (int nt2 = 0; nt2 < OT / 2; ++nt2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, k_t(kk * 16, nt2 * 2) + st);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(acc[mt][2 * nt2], df[mt][kk], b[0], b[1]);
          mma_16816<T>(acc[mt][2 * nt2 + 1], df[mt][kk], b[2], b[3]);
        }
      }
    }
  }

  // ---- store dQ·scale --------------------------------------------------------------------
  T* dq = static_cast<T*>(p.dq) + batch * f.q_stride[0] + head * f.q_stride[2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = qw0 + mt * 16 + g + h * 8;
      if (row >= sq) continue;
      T* dq_row = dq + (int64_t)row * f.q_stride[1];
#pragma unroll
      for (int nt = 0; nt < OT; ++nt) {
        const int col = nt * 8 + tig * 2;
        if (col < f.head_dim)
          *reinterpret_cast<uint32_t*>(dq_row + col) =
              pack2<T>(acc[mt][nt][2 * h] * f.scale, acc[mt][nt][2 * h + 1] * f.scale);
      }
    }
}

template <class T, class C>
void launch_bwd_q(const BwdParams& params, int batch, const float* lse2, const float* delta,
                  int rows_pad, cudaStream_t stream) {
  using Dv = BwdQDerived<C>;
  auto kernel = bwd_q_kernel<T, C>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Dv::kSmemBytes);
  const int num_qblocks = (params.f.mask.seqlen_q + C::kBlockQ - 1) / C::kBlockQ;
  BwdParams p = params;
  for (int b0 = 0; b0 < batch; b0 += 65535) {  // gridDim.z is at most 65535
    p.f.batch_offset = b0;
    const dim3 grid(num_qblocks, p.f.heads_q, std::min(batch - b0, 65535));
    kernel<<<grid, Dv::kThreads, Dv::kSmemBytes, stream>>>(p, lse2, delta, rows_pad);
  }
}

}  // namespace flash::cuda
