// The wgmma products of one step of the Hopper backward (bwd_wgmma_kernel.cuh): how a block's
// tiles are shared out over its MMA warpgroups, where a step's shared tiles lie, and the four
// product groups (Sᵀ / dPᵀ, dV / dK from registers or shared tiles, dQᵀ). Layouts: K / V and
// the Q / dO stages 128-byte swizzled ([D/64][rows][64]), dSᵀ / Pᵀ tiles [BK keys][BQ queries]
// with 64-byte swizzle (BQ = 32) or 128-byte swizzle in 64-query panels ([BQ/64][BK][64])
// (bwd_configs.hpp, BwdWgmmaLayout); the single-panel layouts checked by tests/cuda/wgmma_check.
#pragma once

#include <cstdint>

#include "bwd_configs.hpp"
#include "wgmma_ops.cuh"

namespace flash::cuda {

template <class T, class C>
struct BwdWgmmaProducts {
  using L = BwdWgmmaLayout<C>;
  static constexpr int D = C::kDim, BQ = C::kBlockQ, BK = C::kBlockKV;
  static constexpr bool kKvInRegs = C::kKvInRegs, kSplitD = C::kSplitD;
  // dQᵀ (D x BQ) is shared out over the warpgroups by 64-row halves of D or, when there
  // are fewer halves than warpgroups (D = 64), by column halves: warpgroup wg then owns
  // queries wg·kDqN...
  static constexpr bool kSplitCols = D / 64 < C::kWarpGroups;
  static constexpr int kHalves = kSplitCols ? 1 : D / 64 / C::kWarpGroups;
  static constexpr int kDqN = kSplitCols ? BQ / C::kWarpGroups : BQ;
  static_assert(kSplitCols ? C::kWarpGroups == 2 && D == 64 : (D / 64) % C::kWarpGroups == 0,
                "dQᵀ splits evenly over the warpgroups");
  // kSplitD (D = 256): the warpgroups share the block's 64 keys; warpgroup wg computes Sᵀ and
  // dPᵀ for queries wg·kQueriesPerWg.. and dK, dV for columns wg·kColsPerWg.. Otherwise each owns
  // its 64 keys with all queries and all columns.
  static constexpr int kQueriesPerWg = kSplitD ? BQ / C::kWarpGroups : BQ;  // columns of Sᵀ
  // Columns that can be non-zero (C::kUsedDim, a multiple of 16 up to D): the Sᵀ / dPᵀ k16
  // steps and, with own keys, the width of dK / dV; the tiles past them hold zeros.
  static constexpr int kUsedDim = C::kUsedDim;
  static constexpr int kColsPerWg = kSplitD ? D / C::kWarpGroups : kUsedDim;  // of dK / dV
  static_assert(kQueriesPerWg % 16 == 0 && kUsedDim % 16 == 0 && kUsedDim <= D &&
                    kColsPerWg % (kSplitD ? 64 : 16) == 0,
                "whole k16 steps of Pᵀ and of the used columns; kSplitD: whole 64-column atoms");
  static constexpr int KS = BQ / 16;  // k16 steps of dV / dK
  // dSᵀ / Pᵀ tile geometry (BwdWgmmaLayout: 64-byte rows or 64-query panels).
  static constexpr int kDsRowBytes = L::kDsRowBytes, kDsPanelBytes = L::kDsPanelBytes;
  static constexpr uint32_t kDsSwizzle = BQ == 32 ? kGmmaSwizzle64 : kGmmaSwizzle128;
  using Acc = float[kQueriesPerWg / 2];  // an Sᵀ / dPᵀ accumulator, this thread's part
  using ColsAcc = float[kColsPerWg / 2];
  using KvFrags = uint32_t[kKvInRegs ? D / 16 : 1][4];
  using Frags = uint32_t[KS][4];
  using DqAcc = float[kHalves][kDqN / 2];

  uint32_t base;     // the 1024-aligned shared window
  int wg;            // this warpgroup
  uint32_t wg_rows;  // its 64 key rows inside each K / V atom (kSplitD: 0)
  int s_q_first;     // its first query column of Sᵀ / dPᵀ
  int d_first;       // its first column of dK / dV
  int q_first;       // its first query column of dQᵀ

  __device__ __forceinline__ BwdWgmmaProducts(uint32_t base_, int wg_)
      : base(base_),
        wg(wg_),
        wg_rows(kSplitD ? 0 : wg_ * 64 * 128),
        s_q_first(kSplitD ? wg_ * kQueriesPerWg : 0),
        d_first(kSplitD ? wg_ * kColsPerWg : 0),
        q_first(kSplitCols ? wg_ * kDqN : 0) {}

  // A step's shared tiles: its Q / dO / lse / Δ stage, dSᵀ and Pᵀ tiles.
  __device__ __forceinline__ uint32_t stage_q(int step) const {
    return base + L::kStage + (step % L::kStages) * L::kStageBytes;
  }
  __device__ __forceinline__ uint32_t ds_tile(int step) const {
    return base + L::kDs + (step % L::kDsTiles) * L::kDsBytes;
  }
  __device__ __forceinline__ uint32_t pt_tile(int step) const {
    return base + L::kPt + (step % L::kDsTiles) * L::kDsBytes;
  }
  // Row block i of dQᵀ that this warpgroup computes (64 rows of D each).
  __device__ __forceinline__ int half(int i) const { return kSplitCols ? 0 : wg * kHalves + i; }

  // Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ (K-major operands: k16 step kk is 32 bytes into the kk/4-th
  // 64-column atom): rows (this warpgroup's 64 keys) of a K-major [keys][D] tile times the
  // K-major [BQ][D] tile, transposed (kSplitD: all 64 keys times the kQueriesPerWg queries
  // from s_q_first). kKvInRegs: the rows come from this warp's register fragments of them,
  // so only the queries' tile is read from shared memory.
  __device__ __forceinline__ void keys_times_queries_t(Acc& acc, uint32_t keys,
                                                       const KvFrags& key_frags,
                                                       uint32_t queries) const {
    const uint64_t keys_desc = gmma_desc(keys + wg_rows, 16, 1024, kGmmaSwizzle128);
    const uint64_t queries_desc = gmma_desc(queries + s_q_first * 128, 16, 1024, kGmmaSwizzle128);
#pragma unroll
    for (int kk = 0; kk < kUsedDim / 16; ++kk) {
      const uint32_t off_k = (kk / 4) * BK * 128 + (kk % 4) * 32;
      const uint32_t off_q = (kk / 4) * BQ * 128 + (kk % 4) * 32;
      if constexpr (kKvInRegs)
        wgmma_rs<T, kQueriesPerWg, 0>(acc, key_frags[kk], gmma_desc_add(queries_desc, off_q),
                                      kk > 0);
      else
        wgmma_ss<T, kQueriesPerWg, 0, 0>(acc, gmma_desc_add(keys_desc, off_k),
                                         gmma_desc_add(queries_desc, off_q), kk > 0);
    }
  }
  // dV += Pᵀ·dO, dK += dSᵀ·Q (B MN-major: k16 step = 16 rows = 2048 bytes; LBO = the next
  // 64 columns, BQ rows further), A from registers.
  __device__ __forceinline__ void dv_dk(ColsAcc& acc_dv, ColsAcc& acc_dk, int step, const Frags& pf,
                                        const Frags& df) const {
    const uint64_t q_desc = gmma_desc(stage_q(step), BQ * 128, 1024, kGmmaSwizzle128);
    const uint64_t do_desc = gmma_desc_add(q_desc, L::kTileQ);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
      wgmma_rs<T, kColsPerWg, 1>(acc_dv, pf[kk], gmma_desc_add(do_desc, kk * 2048), 1);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
      wgmma_rs<T, kColsPerWg, 1>(acc_dk, df[kk], gmma_desc_add(q_desc, kk * 2048), 1);
  }
  // k16 step kk of a K-major Pᵀ / dSᵀ tile: 32 bytes into a row, the next panel every
  // kDsRowBytes / 32 steps.
  static constexpr uint32_t ds_k_offset(int kk) {
    return (kk / (kDsRowBytes / 32)) * kDsPanelBytes + (kk % (kDsRowBytes / 32)) * 32;
  }
  // The same with Pᵀ / dSᵀ from the step's shared tiles (K-major A: this warpgroup's 64
  // rows; k16 step kk at ds_k_offset(kk)).
  // kSplitD: all 64 keys' rows, this warpgroup's columns (d_first / 64 atoms further).
  __device__ __forceinline__ void dv_dk_ss(ColsAcc& acc_dv, ColsAcc& acc_dk, int step) const {
    const uint64_t q_desc =
        gmma_desc(stage_q(step) + (d_first / 64) * BQ * 128, BQ * 128, 1024, kGmmaSwizzle128);
    const uint64_t do_desc = gmma_desc_add(q_desc, L::kTileQ);
    const uint32_t a_rows = (kSplitD ? 0 : wg) * 64 * kDsRowBytes;  // this warpgroup's keys
    const uint64_t pt_desc = gmma_desc(pt_tile(step) + a_rows, 16, 8 * kDsRowBytes, kDsSwizzle);
    const uint64_t ds_desc = gmma_desc(ds_tile(step) + a_rows, 16, 8 * kDsRowBytes, kDsSwizzle);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
      wgmma_ss<T, kColsPerWg, 0, 1>(acc_dv, gmma_desc_add(pt_desc, ds_k_offset(kk)),
                                    gmma_desc_add(do_desc, kk * 2048), 1);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
      wgmma_ss<T, kColsPerWg, 0, 1>(acc_dk, gmma_desc_add(ds_desc, ds_k_offset(kk)),
                                    gmma_desc_add(q_desc, kk * 2048), 1);
  }
  // dQᵀ = Kᵀ·dSᵀ (both MN-major; k16 step = 16 keys): rows 64·half(i), columns q_first..,
  // over all BK keys; the dSᵀ column offset stays inside the swizzle atom (the pattern
  // follows absolute addresses) of its 64-query panel (LBO: the next panel).
  static_assert(!kSplitCols || BQ <= 64 || kDqN % 64 == 0,
                "a warpgroup's dQᵀ columns: inside one panel or whole panels");
  __device__ __forceinline__ void dq(DqAcc& dq, int step) const {
    const uint32_t col =
        BQ <= 64 ? q_first * 2 : (q_first / 64) * kDsPanelBytes + (q_first % 64) * 2;
    const uint64_t ds_desc =
        gmma_desc(ds_tile(step) + col, kDsPanelBytes, 8 * kDsRowBytes, kDsSwizzle);
#pragma unroll
    for (int i = 0; i < kHalves; ++i) {
      const uint64_t k_desc =
          gmma_desc(base + L::kK + half(i) * BK * 128, BK * 128, 1024, kGmmaSwizzle128);
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk)
        wgmma_ss<T, kDqN, 1, 1>(dq[i], gmma_desc_add(k_desc, kk * 2048),
                                gmma_desc_add(ds_desc, kk * 16 * kDsRowBytes), kk > 0);
    }
  }
};

}  // namespace flash::cuda
