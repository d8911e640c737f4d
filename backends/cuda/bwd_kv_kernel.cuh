// Backward on tensor cores (f16 / bf16 inputs, f32 accumulation): dK, dV and dQ in one
// kernel.
//
// Algorithm (FlashAttention-2 backward, key-tile outer loop): a block owns a key tile of
// kBlockKV rows of one (batch, kv head); each warp owns 16·kMTiles key rows. K and V of
// the tile stay in shared memory, and the warp's slices of dK and dV stay in registers
// while the block walks every query tile that sees the key tile, for each query head of
// the GQA group in turn (a fixed order: the sum over the group is deterministic).
// Per query tile, with Q, dO, lse and Δ brought by cp.async one stage ahead:
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ                   (mma.sync m16n8k16, ldmatrix)
//   Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e)    (softcap: c·tanh(...) first)
//   dSᵀ = Pᵀ∘(dPᵀ − Δ)                        (softcap: times 1 − tanh²)
//   dV += Pᵀ·dO, dK += dSᵀ·Q                  (Pᵀ, dSᵀ re-packed from the accumulators
//                                              as A fragments, dO/Q by ldmatrix.trans)
//   dQ_partial = dS·K                          (dSᵀ through shared memory, all warps)
//   dQ_accum += dQ_partial                     (sm_90: staged in shared memory, one
//                                              cp.reduce.async.bulk; else per-thread adds)
// Five products per tile, as FlashAttention-2. Determinism without ordering waits: the
// grid has dq_splits blocks per (batch, kv head); block `split` walks key blocks split,
// 2·splits−1−split, 2·splits+split, ... (a snake, so causal work evens out) and, in the
// default mode, adds only into its own f32 slice; each element of a slice is written by
// one thread in program order, and bwd_dq_convert sums the slices in a fixed order.
// nondeterministic mode: one block per key block, all adding into one slice.
// dK is scaled by the softmax scale once at the end (dQ in bwd_dq_convert). Head dims
// past 128 run two passes (dV, then dK and dQ, Sᵀ recomputed) so that one 16 x D
// accumulator per warp suffices. Query tiles outside the causal / window band are never
// visited; only tiles crossing a mask edge pay per-element masks.
//
// Tolerance class: f32 accumulation; P and dS are rounded to the input dtype before
// the three products (as FlashAttention does), inside the 2x-naive-in-dtype rule.
// Measured (H200, bf16, deterministic, FLASH_CUDA_BWD=mma: what sm_80 and other head dims
// run): D=64 190-224 TFLOP/s, D=128 191-239 at S = 2k / 16k (bench/RESULTS.md, "cuda
// backward, 2026-11-22 (2)"). How to run: tests/cuda/device_bwd.sh.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "bwd_ops.cuh"
#include "tma_ops.cuh"

namespace flash::cuda {

// This warp's dSᵀ fragments (or zeros when frag is null) -> the shared [BK][BQ] tile
// (rows of kDsRowBytes, see BwdKvDerived).
template <class T, int MT, int KS, int BQ>
__device__ __forceinline__ void write_ds_tile(unsigned char* tile, int warp, int lane,
                                              const uint32_t* frag) {
  constexpr int kRowBytes = (BQ + 8) * 2;
  const int g = lane / 4, tig = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = warp * 16 * MT + mt * 16 + g + (r & 1) * 8;
        const int col = kk * 16 + (r >> 1) * 8 + tig * 2;
        *reinterpret_cast<uint32_t*>(tile + row * kRowBytes + col * 2) =
            frag ? frag[(mt * KS + kk) * 4 + r] : 0u;
      }
}

// How a block adds its dQ partials (BQ x D f32 per step) into the accumulator:
//  bulk: the warps write the partial to shared memory, one thread hands it to the
//        copy engine as one cp.reduce.async.bulk (sm_90: whole 128-byte lines reduced in
//        L2, no per-element atomics from the SM);
//  red:  each thread adds its fragment with red.global.add (pre-sm_90, and D = 256,
//        whose shared memory has no room for the staging buffers).
enum class DqAdd { bulk, red };

// One bulk reduce-add of `bytes` f32 from shared memory into dst (its own bulk group).
__device__ __forceinline__ void bulk_reduce_add(float* dst, uint32_t src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
      "cp.async.bulk.commit_group;\n" ::"l"(dst),
      "r"(src), "r"(bytes)
      : "memory");
#endif
}
// Copies `bytes` of shared memory to global memory (a bulk copy, not an add: the first add
// into an ordered dQ tile, which then needs no zeroed accumulator).
__device__ __forceinline__ void bulk_store(float* dst, uint32_t src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
      "cp.async.bulk.commit_group;\n" ::"l"(dst),
      "r"(src), "r"(bytes)
      : "memory");
#endif
}
// Partial dQ of rows [q0, q0 + BQ) of one head = dS·K, dS from the shared dSᵀ tile (every
// warp has written its rows; the caller synchronised), K resident. Warps split the
// BQ x D partial into (m16 tile, column range) pieces. kAdd = red: added to dq_rows
// (global, row stride kDqRow floats); bulk: written to the shared staging tile
// `stage` (same layout) for the caller to hand to the copy engine.
template <class T, class C, DqAdd kAdd>
__device__ __forceinline__ void dq_partial(float* dq_rows, float* stage, uint32_t ds_base,
                                           uint32_t sK) {
  using Dv = BwdKvDerived<C>;
  constexpr int D = C::kDim, BQ = C::kBlockQ, BK = C::kBlockKV, W = C::kWarps;
  constexpr int kChunks = D / 8, kDsRowBytes = Dv::kDsRowBytes, kRow = Dv::kDqRowFloats;
  constexpr int QM = BQ / 16;         // m16 tiles of the partial dQ
  constexpr int WPM = W / QM;         // warps per m16 tile
  constexpr int NPW = (D / 8) / WPM;  // n8 tiles per warp
  static_assert(W % QM == 0 && (D / 8) % (2 * WPM) == 0, "dQ tiles split evenly over warps");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int qm = warp % QM, ng = warp / QM;

  float acc[NPW][4];
#pragma unroll
  for (int nt = 0; nt < NPW; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
  const int a_row = ((lane >> 4) << 3) + (lane & 7), a_chunk = qm * 2 + ((lane >> 3) & 1);
  const int b_row = (lane & 7) + (((lane >> 3) & 1) << 3), b_chunk = ng * NPW + (lane >> 4);
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) {
    uint32_t a[4];  // dS (rows = queries, k = keys) from the dSᵀ tile, transposed load
    ldmatrix_x4_trans(a, ds_base + (kk * 16 + a_row) * kDsRowBytes + a_chunk * 16);
#pragma unroll
    for (int nt2 = 0; nt2 < NPW / 2; ++nt2) {
      uint32_t b[4];  // K (k = keys, n = dims), transposed load
      ldmatrix_x4_trans(b, tile_addr<kChunks>(sK, kk * 16 + b_row, b_chunk + nt2 * 2));
      mma_16816<T>(acc[2 * nt2], a, b[0], b[1]);
      mma_16816<T>(acc[2 * nt2 + 1], a, b[2], b[3]);
    }
  }
  const int offset = (qm * 16 + g) * kRow + ng * NPW * 8 + tig * 2;
#pragma unroll
  for (int nt = 0; nt < NPW; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int at = offset + h * 8 * kRow + nt * 8;
      if constexpr (kAdd == DqAdd::bulk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        *reinterpret_cast<float2*>(stage + at) = make_float2(acc[nt][2 * h], acc[nt][2 * h + 1]);
#else  // no bulk reductions before sm_90: the bulk_* calls are no-ops there
        atomicAdd(dq_rows + at, acc[nt][2 * h]);
        atomicAdd(dq_rows + at + 1, acc[nt][2 * h + 1]);
#endif
      } else if constexpr (kAdd == DqAdd::red) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // two adjacent columns per add
        asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dq_rows + at),
                     "f"(acc[nt][2 * h]), "f"(acc[nt][2 * h + 1])
                     : "memory");
#else
        atomicAdd(dq_rows + at, acc[nt][2 * h]);
        atomicAdd(dq_rows + at + 1, acc[nt][2 * h + 1]);
#endif
      }
    }
  if constexpr (kAdd == DqAdd::bulk) bulk_fence_writes();
}

// What one launch computes: both gradients, or (head dims past kBwdMaxUnsplitDim, where
// two 16 x D f32 accumulators per warp do not fit the registers) one of them per pass.
enum class KvRole { both, dv, dk };

template <class T, class C, KvRole kRole, DqAdd kAdd, bool kSoftcap>
__global__ void __launch_bounds__(BwdKvDerived<C>::kThreads, C::kMinBlocks)
    bwd_kv_kernel(const BwdParams p, const float* __restrict__ lse2,
                  const float* __restrict__ delta, int rows_pad) {
  using Dv = BwdKvDerived<C>;
  constexpr int D = C::kDim, BQ = C::kBlockQ, BK = C::kBlockKV, MT = C::kMTiles;
  constexpr int kThreads = Dv::kThreads, kChunks = Dv::kChunks;
  constexpr int NT = BQ / 8;   // n8 tiles of Sᵀ per warp (16 keys x BQ queries)
  constexpr int OT = D / 8;    // n8 tiles of dK / dV per warp
  constexpr int KS = BQ / 16;  // k16 steps of the dV / dK products
  constexpr int kTileQ = Dv::kTileQBytes, kStage = Dv::kStageBytes;
  constexpr bool kDoDv = kRole != KvRole::dk, kDoDk = kRole != KvRole::dv;
  constexpr bool kDoDq = kDoDk;  // dQ needs dS, computed where dK is

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sK = smem_addr(smem);
  const uint32_t sV = sK + BK * D * 2;
  const uint32_t sStage = sV + BK * D * 2;  // stage s: Q, dO, lse[BQ], Δ[BQ]
  const float* fStage = reinterpret_cast<const float*>(smem + 2 * BK * D * 2);
  unsigned char* const ds_tile = smem + Dv::kDsOffset;  // dSᵀ [BK][BQ]
  // Bulk mode: kDqStages staging tiles [BQ][kDqRowFloats] f32 of the dQ partials.
  float* const dq_stage = reinterpret_cast<float*>(smem + Dv::kDqOffset);
  constexpr int kDqStages = kAdd == DqAdd::bulk ? Dv::kDqStages : 1;
  constexpr int kDqTileFloats = BQ * Dv::kDqRowFloats;

  const FwdParams& f = p.f;
  const int group = f.group;
  const int splits = p.dq_splits;
  const BwdBlock<T> blk(p);
  const MaskParams& mask = blk.mask;  // this sequence (packed batches, sequence.cuh)
  const int sq = mask.seqlen_q, skv = mask.seqlen_kv;
  const int num_kv_blocks = (skv + BK - 1) / BK;
  const int split = blk.split, kv_head = blk.kv_head;
  const int64_t batch = blk.batch;
  const T *k = blk.k, *v = blk.v, *q_batch = blk.q_batch, *do_batch = blk.do_batch;
  T *dk = blk.dk, *dv = blk.dv;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // This block's dQ slice, rows of (batch, head) h at dq_slice + h * rows_pad * D.
  float* const dq_slice = p.dq_accum + (p.dq_exclusive ? split * p.dq_slice_floats : 0) +
                          batch * f.heads_q * (int64_t)rows_pad * Dv::kDqRowFloats;
  // Bulk mode: the partial of the previous step waits in its staging tile until the next
  // barrier, after which thread 0 hands it to the copy engine.
  float* pending_dst = nullptr;
  int pending_stage = 0;
  auto issue_pending = [&] {
    if (kAdd == DqAdd::bulk && tid == 0 && pending_dst != nullptr)
      bulk_reduce_add(pending_dst, smem_addr(dq_stage + pending_stage * kDqTileFloats),
                      kDqTileFloats * 4);
    pending_dst = nullptr;
  };

  const int g = lane / 4, tig = lane % 4;

  // ldmatrix lane patterns (see LdsmAddr): K/V rows as A operand; Q/dO as B operand
  // (plain for Sᵀ, dPᵀ; transposed for dK, dV). V = K + BK*D*2, dO = Q + kTileQ.
  const LdsmAddr<kChunks> kv_a(sK + warp * 16 * MT * kChunks * 16, lane & 15, lane >> 4);
  const LdsmAddr<kChunks> q_b(sStage, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const LdsmAddr<kChunks> q_t(sStage, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);

  const ScoreGrad grad(f.scale, f.softcap, kBwdLog2e);

  // Key blocks of this split: round r takes block r*splits + split (r even) or
  // r*splits + splits-1-split (r odd).
  for (int round = 0; round * splits < num_kv_blocks; ++round) {
    const int kv_block = round * splits + ((round & 1) ? splits - 1 - split : split);
    if (kv_block >= num_kv_blocks) continue;
    const int k0 = kv_block * BK;
    const int kw0 = k0 + warp * 16 * MT;  // this warp's first key row

    const RowRange rows = bwd_visible_rows(mask, k0, min(k0 + BK, skv) - 1);
    const int qt_begin = rows.begin / BQ;
    const int tiles_per_head = rows.end > rows.begin ? (rows.end + BQ - 1) / BQ - qt_begin : 0;
    const int steps = tiles_per_head * group;

    auto load_step = [&](int step, int stage) {
      const int head = kv_head * group + step / tiles_per_head;
      const int q0 = (qt_begin + step % tiles_per_head) * BQ;
      const uint32_t st = sStage + stage * kStage;
      load_tile_async<BQ, kChunks, kThreads>(st, q_batch + head * f.q_stride[2], f.q_stride[1], q0,
                                             sq, f.head_dim);
      load_tile_async<BQ, kChunks, kThreads>(st + kTileQ, do_batch + head * f.o_stride[2],
                                             f.o_stride[1], q0, sq, f.head_dim_v);
      const int64_t row_off = (batch * f.heads_q + head) * rows_pad + q0;
      float* fl = const_cast<float*>(fStage) + (stage * kStage + 2 * kTileQ) / 4;
      load_floats_async(fl, lse2 + row_off, BQ, 0);
      load_floats_async(fl + BQ, delta + row_off, BQ, BQ / 4);
    };

    float acc_dk[MT][OT][4], acc_dv[MT][OT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < OT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc_dk[mt][nt][e] = 0.f;
          acc_dv[mt][nt][e] = 0.f;
        }

    bool k_nonfinite = false;  // this key block's K holds a NaN or inf (bwd_ops.cuh)
    __syncthreads();           // every warp is done with the previous key block's K, V and stages
    if (steps > 0) {
      load_tile_async<BK, kChunks, kThreads>(sK, k, f.k_stride[1], k0, skv, f.head_dim);
      load_tile_async<BK, kChunks, kThreads>(sV, v, f.v_stride[1], k0, skv, f.head_dim_v);
      load_step(0, 0);
      cp_async_commit();
    }

    for (int step = 0; step < steps; ++step) {
      const int stage = step & 1;
      const int head = kv_head * group + step / tiles_per_head;
      const int q0 = (qt_begin + step % tiles_per_head) * BQ;
      cp_async_wait<0>();
      __syncthreads();  // this stage visible to all; every warp is done with the other one
      if (step == 0) {  // a NaN or inf in this key block's K: bwd_ops.cuh, "Non-finite keys"
        k_nonfinite = quarantine_nonfinite_keys<T, BK>(
            sK, BK * kChunks * 16, [&](int r) { return tile_addr<kChunks>(sV, r, 0); }, k,
            f.k_stride[1], k0, skv, f.head_dim);
        if (k_nonfinite) __syncthreads();
      }
      if constexpr (kDoDq) issue_pending();  // the last step's dQ staging tile is complete
      if (step + 1 < steps) load_step(step + 1, stage ^ 1);
      cp_async_commit();

      // A warp whose keys no row of this tile sees skips the tile (causal diagonal); its
      // rows of the dSᵀ tile are zero.
      const RowRange wrows = bwd_visible_rows(mask, kw0, kw0 + 16 * MT - 1);
      const bool active = wrows.end > q0 && wrows.begin < q0 + BQ && wrows.end > wrows.begin;
      if (!active) {
        if constexpr (kDoDq) write_ds_tile<T, MT, KS, BQ>(ds_tile, warp, lane, nullptr);
      } else {
        const uint32_t st = stage * kStage;

        // ---- Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ ----------------------------------------------------
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
          uint32_t ak[MT][4], av[MT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            ldmatrix_x4(ak[mt], kv_a(mt * 16, kk * 2));
            if constexpr (kDoDk) ldmatrix_x4(av[mt], kv_a(mt * 16, kk * 2) + BK * D * 2);
          }
#pragma unroll
          for (int nt2 = 0; nt2 < NT / 2; ++nt2) {
            uint32_t b[4];
            ldmatrix_x4(b, q_b(nt2 * 16, kk * 2) + st);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              mma_16816<T>(s[mt][2 * nt2], ak[mt], b[0], b[1]);
              mma_16816<T>(s[mt][2 * nt2 + 1], ak[mt], b[2], b[3]);
            }
            if constexpr (kDoDk) {  // dPᵀ only feeds dSᵀ
              ldmatrix_x4(b, q_b(nt2 * 16, kk * 2) + st + kTileQ);
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                mma_16816<T>(dp[mt][2 * nt2], av[mt], b[0], b[1]);
                mma_16816<T>(dp[mt][2 * nt2 + 1], av[mt], b[2], b[3]);
              }
            }
          }
        }

        // ---- Pᵀ and dSᵀ (accumulator rows = keys, columns = queries) --------------------
        const float* sl = fStage + (stage * kStage + 2 * kTileQ) / 4;
        // Tiles inside the mask band take a loop without per-element masks (a branch per
        // element costs a convergence barrier each).
        auto grads = [&](auto masked) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const float2 l2 = *reinterpret_cast<const float2*>(sl + nt * 8 + tig * 2);
            const float2 dl = *reinterpret_cast<const float2*>(sl + BQ + nt * 8 + tig * 2);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                float ds;
                float pv = grad.template eval<false, kSoftcap>(
                    s[mt][nt][e], dp[mt][nt][e], (e & 1) ? l2.y : l2.x, (e & 1) ? dl.y : dl.x, ds);
                if constexpr (decltype(masked)::value) {
                  const int row = q0 + nt * 8 + tig * 2 + (e & 1);
                  const int key = kw0 + mt * 16 + g + (e >= 2 ? 8 : 0);
                  if (!key_visible(mask, row, key)) pv = ds = 0.f;
                }
                s[mt][nt][e] = pv;
                dp[mt][nt][e] = ds;
              }
          }
        };
        if (tile_fully_visible(mask, q0, q0 + BQ - 1, kw0, kw0 + 16 * MT - 1))
          grads(std::false_type{});
        else
          grads(std::true_type{});
        // Columns 16kk..16kk+15 of Pᵀ / dSᵀ (accumulator tiles 2kk, 2kk+1) = A fragment kk.
        uint32_t pf[MT][KS][4], df[MT][KS][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kk = 0; kk < KS; ++kk) {
            pf[mt][kk][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            pf[mt][kk][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            pf[mt][kk][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            pf[mt][kk][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            df[mt][kk][0] = pack2<T>(dp[mt][2 * kk][0], dp[mt][2 * kk][1]);
            df[mt][kk][1] = pack2<T>(dp[mt][2 * kk][2], dp[mt][2 * kk][3]);
            df[mt][kk][2] = pack2<T>(dp[mt][2 * kk + 1][0], dp[mt][2 * kk + 1][1]);
            df[mt][kk][3] = pack2<T>(dp[mt][2 * kk + 1][2], dp[mt][2 * kk + 1][3]);
          }
        // dSᵀ goes to shared memory first: the dQ product below needs every warp's rows.
        if constexpr (kDoDq) write_ds_tile<T, MT, KS, BQ>(ds_tile, warp, lane, &df[0][0][0]);

          // ---- dV += Pᵀ·dO, dK += dSᵀ·Q ---------------------------------------------------
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
          for (int nt2 = 0; nt2 < OT / 2; ++nt2) {
            uint32_t b[4];
            if constexpr (kDoDv) {
              ldmatrix_x4_trans(b, q_t(kk * 16, nt2 * 2) + st + kTileQ);
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                mma_16816<T>(acc_dv[mt][2 * nt2], pf[mt][kk], b[0], b[1]);
                mma_16816<T>(acc_dv[mt][2 * nt2 + 1], pf[mt][kk], b[2], b[3]);
              }
            }
            if constexpr (kDoDk) {
              ldmatrix_x4_trans(b, q_t(kk * 16, nt2 * 2) + st);
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                mma_16816<T>(acc_dk[mt][2 * nt2], df[mt][kk], b[0], b[1]);
                mma_16816<T>(acc_dk[mt][2 * nt2 + 1], df[mt][kk], b[2], b[3]);
              }
            }
          }
        }

      }  // active

      // ---- dQ(rows q0..q0+BQ of `head`) += dS·K (every warp) --------------------------
      if constexpr (kDoDq) {
        // The staging tile this step writes was handed to the copy engine kDqStages steps
        // ago: thread 0 waits for that read before the barrier releases the writers.
        if (kAdd == DqAdd::bulk && tid == 0) bulk_wait_read<kDqStages - 1>();
        __syncthreads();  // the whole dSᵀ tile is written
        const int dq_st = step % kDqStages;
        float* const dst = dq_slice + ((int64_t)head * rows_pad + q0) * Dv::kDqRowFloats;
        dq_partial<T, C, kAdd>(dst, dq_stage + dq_st * kDqTileFloats, smem_addr(ds_tile), sK);
        pending_dst = dst;
        pending_stage = dq_st;
      }
    }
    if constexpr (kDoDq && kAdd == DqAdd::bulk) {
      __syncthreads();  // the last staging tile is complete
      issue_pending();
      // Every add of this key block is performed before the next one's start: a slice
      // element then receives its adds in program order (bitwise-reproducible sums).
      if (tid == 0) bulk_wait_all();
    }

    // ---- store dK·scale and dV (rows past seqlen_kv and columns past the dims dropped) --
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = kw0 + mt * 16 + g + h * 8;
        if (row >= skv) continue;
        T* dk_row = dk + (int64_t)row * f.k_stride[1];
        T* dv_row = dv + (int64_t)row * f.v_stride[1];
        const bool nan_key =
            k_nonfinite && row_nonfinite(k + (int64_t)row * f.k_stride[1], f.head_dim);
#pragma unroll
        for (int nt = 0; nt < OT; ++nt) {
          const int col = nt * 8 + tig * 2;
          const float dk0 = acc_dk[mt][nt][2 * h], dk1 = acc_dk[mt][nt][2 * h + 1];
          if (kDoDk && col < f.head_dim)
            *reinterpret_cast<uint32_t*>(dk_row + col) = pack2<T>(dk0 * f.scale, dk1 * f.scale);
          if (kDoDv && col < f.head_dim_v)
            *reinterpret_cast<uint32_t*>(dv_row + col) =
                pack2<T>(dv_of_key(nan_key, dk0, acc_dv[mt][nt][2 * h]),
                         dv_of_key(nan_key, dk1, acc_dv[mt][nt][2 * h + 1]));
        }
      }
  }
}

template <class T, class C, KvRole kRole, DqAdd kAdd>
void launch_bwd_kv_role(const BwdParams& params, int batch, const float* lse2, const float* delta,
                        int rows_pad, cudaStream_t stream) {
  using Dv = BwdKvDerived<C>;
  launch_bwd_blocks<bwd_kv_kernel<T, C, kRole, kAdd, false>,
                    bwd_kv_kernel<T, C, kRole, kAdd, true>>(
      params, batch, Dv::kThreads, Dv::kSmemBytes, lse2, delta, rows_pad, stream);
}

template <class T, class C>
void launch_bwd_kv(const BwdParams& p, int batch, const float* lse2, const float* delta,
                   int rows_pad, cudaStream_t stream) {
  constexpr DqAdd kAdd = BwdKvDerived<C>::kDqStages > 0 ? DqAdd::bulk : DqAdd::red;
  if constexpr (C::kDim > kBwdMaxUnsplitDim) {  // dV pass (Sᵀ, dV), then dK + dQ pass
    launch_bwd_kv_role<T, C, KvRole::dv, kAdd>(p, batch, lse2, delta, rows_pad, stream);
    launch_bwd_kv_role<T, C, KvRole::dk, kAdd>(p, batch, lse2, delta, rows_pad, stream);
  } else {
    launch_bwd_kv_role<T, C, KvRole::both, kAdd>(p, batch, lse2, delta, rows_pad, stream);
  }
}

}  // namespace flash::cuda
