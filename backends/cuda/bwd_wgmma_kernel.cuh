// Backward on Hopper tensor cores (sm_90a wgmma; f16 / bf16, tiles 64, 128 and 256 wide, the
// products cut to 96 / 192 columns for those head dims): dK, dV and dQ in one kernel, the
// algorithm of bwd_kv_kernel.cuh with warpgroup products.
//
// A block is kWarpGroups warpgroups (4 warps each) owning kBlockKV = 64·kWarpGroups keys of
// one (batch, kv head) (kSplitD, below: 64 keys they share); warpgroup wg holds keys 64wg..,
// its warp w keys 16w..16w+15 of every 64-row accumulator. The warpgroups share the Q / dO stages,
// and split dQᵀ (by rows of D, or by query columns at D = 64). K and V stay in shared memory
// (128-byte-swizzled, the layout wgmma reads), dK and dV in registers, while the block walks the
// query tiles (kBlockQ rows: 128 at D = 64 (softcap: 64), else 64; Q, dO, lse, Δ by two loader
// warps, below, into a ring of stages):
//   Sᵀ  = K·Qᵀ, dPᵀ = V·dOᵀ      wgmma m64 x BQ, both operands K-major in shared memory
//                                 (D = 64 softcap: K / V rows as register A fragments,
//                                 C::kKvInRegs)
//   Pᵀ, dSᵀ element-wise          (bwd_ops.cuh ScoreGrad; masks only on edge tiles)
//   dV += Pᵀ·dO, dK += dSᵀ·Q      wgmma m64 x D, B MN-major; A = Pᵀ / dSᵀ from registers
//                                 or from shared tiles (kSplitD)
//   dQᵀ = Kᵀ·dSᵀ                  wgmma m64 x BQ per 64 rows of D, dSᵀ via shared memory (64-
//                                 or 128-byte swizzle, 64-query panels), both operands MN-major
//   dQ_accum += dQ                 staged in shared memory, one cp.reduce.async.bulk
// D = 256 (C::kSplitD): 64 keys x 256 columns of dK and dV are more registers than a thread
// has, so the two warpgroups share the block's 64 keys: each computes Sᵀ, dPᵀ for half of
// the query tile (m64 x BQ/2), Pᵀ and dSᵀ go to shared tiles, and each accumulates dK, dV
// for half of the columns (m64 x 128) and dQᵀ for half of the rows of D; the dQ staging tile
// is the step's own Q / dO stage once both warpgroups have read it (no room for both).
// Step order: at D = 64 and 128 each step is serial inside a warpgroup and the two warpgroups
// take turns issuing their products (ping-pong), so one's element-wise phase runs under the
// other's products; D = 256 is serial, the warpgroups meeting at block barriers. Softcap is a
// template parameter (its problems run BwdWgmmaSoftcapConfig<D>, bwd_configs.hpp, without
// turns) and tiles inside the mask band skip the per-element masks. One block per key block; all
// blocks add into one f32 dQ accumulator (bwd_dq_convert scales and converts it). Deterministic
// mode: the adds into each query tile happen in a fixed order (per-tile counters, below): key-block
// order (highest first, each block walking its tiles upward) under a mask band, arrival order of
// staggered walks without one. A warpgroup after the MMA ones gives its registers away; one of its
// threads waits for a staging tile's "full" mbarrier, for its turn, issues the bulk add, frees the
// tile ("empty") once read and releases the counter once the add completed. Warps 2-3 of it are the
// loader: one thread issues each step's Q / dO boxes (TMA) and lse / Δ (bulk copies) into a ring of
// stages with full / empty mbarriers (thread 0 issues the first stages with K and V); packed
// batches copy with cp.async from all 64 loader threads. The MMA warps wait for another block
// only through "empty": at D = 64 / 128 for a staging tile two steps back; at D = 256
// (kDqInStage) mid-step, for the read of the previous step's tile, so in the ordered mode a late
// block earlier in a tile's order can stall them by about half a step; that wait cannot close a
// cycle (see "ordered dQ accumulation").
//
// Tolerance class: f32 accumulation; P and dS rounded to the input dtype before the three
// products (as FlashAttention does), inside the 2x-naive-in-dtype rule.
// Measured (H200, bf16, FlashAttention's shapes, deterministic, S = 2k / 8k / 16k, interleaved
// with torch in one process): of cuDNN D = 64 1.01-1.08, D = 128 0.94-0.96, D = 256 1.02-1.15
// (session 38), D = 96 1.03-1.11, D = 192 1.08-1.28 (session 44); 1.5-1.9x torch's
// FlashAttention-2. What changed what, session by session
// (the loader warps, the dQ warpgroup, the ping-pong order, ...): bench/RESULTS.md. How to run:
// tests/cuda/device_bwd.sh; layouts checked by tests/cuda/wgmma_check.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "bwd_dq_order.cuh"
#include "bwd_kv_kernel.cuh"
#include "bwd_wgmma_params.cuh"
#include "bwd_wgmma_products.cuh"
#include "phase_trace.cuh"
#include "tma_ops.cuh"
#include "wgmma_ops.cuh"

namespace flash::cuda {

template <class T, class C, bool kSoftcap>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    bwd_wgmma_kernel(const BwdParams p, const float* __restrict__ lse2,
                     const float* __restrict__ delta, int rows_pad,
                     const __grid_constant__ BwdLoadMaps maps) {
#if FLASH_WGMMA_AVAILABLE
  using L = BwdWgmmaLayout<C>;
  constexpr int D = C::kDim, BQ = C::kBlockQ, BK = C::kBlockKV;
  // kThreads: the MMA warpgroups' threads (they load the tiles); the dQ warpgroup comes
  // after them.
  constexpr int kThreads = C::kMmaThreads, kChunks = D / 8;
  // Register A operands (bwd_configs.hpp, REGS): K / V rows for Sᵀ / dPᵀ.
  constexpr bool kKvInRegs = C::kKvInRegs;
  static_assert(!kKvInRegs || !C::kSplitD, "register K / V rows: each warpgroup owns its keys");
  // How the tiles are shared out over the warpgroups, and the step's products.
  using Pr = BwdWgmmaProducts<T, C>;
  constexpr bool kSplitD = C::kSplitD;
  constexpr int kHalves = Pr::kHalves, kDqN = Pr::kDqN, kQueriesPerWg = Pr::kQueriesPerWg;
  constexpr int kColsPerWg = Pr::kColsPerWg, KS = Pr::KS;
  constexpr int NJ = kQueriesPerWg / 8;   // n8 blocks of the Sᵀ accumulator
  constexpr int KP = kQueriesPerWg / 16;  // A fragments (k16 steps) in one Sᵀ accumulator
  constexpr int kDqRow = L::kDqRowFloats, kDqTile = BQ * kDqRow;

  extern __shared__ unsigned char smem_raw[];
  // wgmma's swizzle patterns repeat every 1024 bytes: align the window (slack included).
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  unsigned char* const smem = smem_raw + (base - raw);
  const uint32_t sK = base + L::kK, sV = base + L::kV;
  float* const dq_stage = reinterpret_cast<float*>(smem + L::kDq);
  // The dQ warp's barriers, per staging tile: full (kThreads arrivals: written and fenced),
  // empty (the dQ thread's arrival: the copy engine has read it).
  auto dq_full = [&](int st) { return base + L::kBars + 8 * st; };
  auto dq_empty = [&](int st) { return base + L::kBars + 8 * (L::kDqStages + st); };
  // The loader: warps 2 and 3 of the dQ warpgroup fill the stage ring with each step's Q / dO
  // / lse / Δ, ahead of the MMA warps by as many stages as the ring has: one thread with TMA
  // (maps.use), else all 64 with cp.async. Per stage: full (the TMA thread's arrival and its
  // bytes, or one arrival per cp.async thread once its copies landed), empty (every MMA
  // thread is done reading it; kDqInStage: the copy engine has read the dQ tile staged
  // there, dq_empty).
  constexpr int kLoaderFirst = kThreads + 64, kLoaderThreads = 64;
  static_assert(kLoaderThreads % kChunks == 0 && (BQ * kChunks) % kLoaderThreads == 0 &&
                    2 * (BQ / 4) <= kLoaderThreads,
                "the loader threads split a stage's copies evenly");
  auto stage_full = [&](int st) { return base + L::kBars + 8 * (2 * L::kDqStages + st); };
  auto stage_empty = [&](int st) {
    return base + L::kBars + 8 * (2 * L::kDqStages + L::kStages + st);
  };
  // Ping-pong order: per dSᵀ tile, full (both warpgroups' rows written and fenced) and empty
  // (both warpgroups' dQᵀ products have read it); kThreads arrivals each.
  auto ds_full = [&](int step) {
    return base + L::kBars + 8 * (2 * L::kDqStages + 2 * L::kStages + step % L::kDsTiles);
  };
  auto ds_empty = [&](int step) {
    return base + L::kBars +
           8 * (2 * L::kDqStages + 2 * L::kStages + L::kDsTiles + step % L::kDsTiles);
  };
  static_assert(
      2 * L::kDqStages + 2 * L::kStages + (L::kPingPong ? 2 * L::kDsTiles : 0) == L::kBarCount,
      "the layout's barriers");
  if (threadIdx.x == 0) {
    for (int st = 0; st < L::kDqStages; ++st) {
      mbar_init(dq_full(st), kThreads);
      mbar_init(dq_empty(st), 1);
    }
    for (int st = 0; st < L::kStages; ++st) {
      mbar_init(stage_full(st), maps.use ? 1 : kLoaderThreads);
      mbar_init(stage_empty(st), kThreads);
    }
    if constexpr (L::kPingPong) {
      for (int b = 0; b < L::kDsTiles; ++b) {
        mbar_init(ds_full(b), kThreads);
        mbar_init(ds_empty(b), kThreads);
      }
    }
    mbar_init_fence();  // before the first __syncthreads below
  }
  // The MMA warps' barrier (the dQ warpgroup runs apart).
  auto mma_sync = [&] { named_barrier_sync(kBwdMmaBarrier, kThreads); };

  const FwdParams& f = p.f;
  const int group = f.group;
  // One key block per block: bwd_dq_plan gives this kernel as many splits as key blocks
  // and one dQ slice.
  const BwdBlock<T> blk(p);
  const MaskParams& mask = blk.mask;  // this sequence (packed batches, sequence.cuh)
  const int sq = mask.seqlen_q, skv = mask.seqlen_kv;
  const int kv_block = blk.split, kv_head = blk.kv_head;
  const int64_t batch = blk.batch;
  const T *k = blk.k, *v = blk.v, *q_batch = blk.q_batch, *do_batch = blk.do_batch;
  T *dk = blk.dk, *dv = blk.dv;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // Trace roles: thread 0 of MMA warpgroup wg (role wg), the dQ thread, the loader's first.
  PhaseClock clk(tid % 128 == 0 || tid == kLoaderFirst, tid < kThreads    ? tid / 128
                                                        : tid == kThreads ? kBwdTraceDq
                                                                          : kBwdTraceLoader);
  const int g = lane / 4, tig = lane % 4;
  const int wg = warp / 4, wwarp = warp % 4;  // warpgroup, warp within it
  const Pr pr(base, wg);
  const int key_warp = kSplitD ? wwarp : warp;  // the key-row slot of this warp (16 rows each)
  const int s_q_first = pr.s_q_first, d_first = pr.d_first;
  float* const dq_slice = p.dq_accum + batch * f.heads_q * (int64_t)rows_pad * kDqRow;

  const ScoreGrad grad(f.scale, f.softcap, kBwdLog2e);

  const int k0 = kv_block * BK;
  const int kw0 = k0 + key_warp * 16;  // this warp's first key row
  // C::kMaskRowBounds: the query rows that see all 16 of this warp's keys, whose tiles skip the
  // per-element masks, as two bounds held for the whole walk (bwd_configs.hpp).
  const RowInterval full_rows = rows_seeing_all_keys(mask, kw0, kw0 + 15);

  const RowRange rows = bwd_visible_rows(mask, k0, min(k0 + BK, skv) - 1);
  const int qt_begin = rows.begin / BQ;
  const int tiles_per_head = rows.end > rows.begin ? (rows.end + BQ - 1) / BQ - qt_begin : 0;
  const int steps = tiles_per_head * group;

  // The walk: position u in [0, steps) is query head kv_head·group + u / tiles_per_head,
  // tile tiles_per_head − 1 − u % tiles_per_head (query tiles from the last one down: under
  // a causal mask every key block sees the last tiles, so the blocks of a head meet at each
  // tile in key-block order). Arrival order (see above): this block starts at position
  // kv_block · rot_d and wraps around.
  const int rot_n = p.dq_splits;  // key blocks of the head
  // Every block of the head has the same steps, so all agree on whether they rotate.
  const bool rotate = p.dq_rotate && steps >= rot_n;
  const int rot_d = rotate ? steps / rot_n : 0;
  // Rank of this block's add at walk position u: the blocks reach u in the order K, K−1,
  // .., 0, n−1, .., K+1 with K = min(u / d, n − 1) (block i reaches it at step
  // (u − i·d) mod steps, and n·d <= steps).
  auto rotated_rank = [&](int u) {
    const int k_first = min(u / rot_d, rot_n - 1);
    return (k_first - kv_block + rot_n) % rot_n;
  };
  struct Tile {
    int step, head, q0, pos;  // pos: walk position
  };
  const int q0_last = (qt_begin + tiles_per_head - 1) * BQ;
  const bool walk_up = p.walk_up;  // (kernel_params.hpp; never with rotate)
  auto next_tile = [&](Tile t) {
    ++t.step;
    ++t.pos;
    t.q0 += walk_up ? BQ : -BQ;
    if (t.q0 < qt_begin * BQ || t.q0 > q0_last) {
      t.q0 = walk_up ? qt_begin * BQ : q0_last;
      ++t.head;
    }
    if (t.pos == steps) t = Tile{t.step, kv_head * group, q0_last, 0};
    return t;
  };
  // Ordered mode: the counter of tile t and this block's rank among the key blocks that
  // add into it (the order they reach it in: see "ordered dQ accumulation" above).
  auto dq_counter = [&](Tile t) {
    return p.dq_counters + (batch * f.heads_q + t.head) * (rows_pad / BQ) + t.q0 / BQ;
  };
  auto dq_rank = [&](Tile t) -> unsigned {
    if (rotate) return rotated_rank(t.pos);
    const KeyRange keys = visible_keys(mask, t.q0, min(t.q0 + BQ, sq) - 1);
    return walk_up ? (keys.end - 1) / BK - kv_block : kv_block - keys.begin / BK;
  };
  // Shared buffers of a step: Q / dO / lse / Δ stage, dSᵀ tile.
  auto stage_q = [&](int step) { return pr.stage_q(step); };
  auto stage_floats = [&](int step) {
    return reinterpret_cast<float*>(smem + L::kStage + (step % L::kStages) * L::kStageBytes +
                                    2 * L::kTileQ);
  };
  auto ds_tile = [&](int step) { return pr.ds_tile(step); };
  // A step's dQ staging tile: its own stage (kDqInStage) or one of two tiles.
  auto dq_tile = [&](int step) {
    return L::kDqInStage
               ? reinterpret_cast<float*>(smem + L::kStage + (step % L::kStages) * L::kStageBytes)
               : dq_stage + (step % L::kDqStages) * kDqTile;
  };
  auto pt_tile = [&](int step) { return pr.pt_tile(step); };

  // A step's stage by TMA (one thread): D / 64 boxes each of Q and dO, lse and Δ.
  auto load_step_tma = [&](Tile t) {
    const uint32_t st = stage_q(t.step), full = stage_full(t.step % L::kStages);
    mbar_arrive_expect_tx(full, 2 * L::kTileQ + 2 * BQ * 4);
#pragma unroll
    for (int a = 0; a < D / 64; ++a) {
      tma_load_4d(st + a * BQ * 128, &maps.q, full, a * 64, t.q0, t.head, (int)batch);
      tma_load_4d(st + L::kTileQ + a * BQ * 128, &maps.dout, full, a * 64, t.q0, t.head,
                  (int)batch);
    }
    const int64_t row_off = (batch * f.heads_q + t.head) * rows_pad + t.q0;
    const uint32_t fl = smem_addr(stage_floats(t.step));
    bulk_load(fl, lse2 + row_off, BQ * 4, full);
    bulk_load(fl + BQ * 4, delta + row_off, BQ * 4, full);
  };
  // A step's stage by cp.async, loader thread lt (of kLoaderThreads): its 16-byte chunk column of
  // every kLoaderThreads / kChunks-th row, in a loop kept rolled (the loader runs on
  // kBwdDqWarpRegs registers).
  auto load_step = [&](Tile t, int lt) {
    const int head = t.head, q0 = t.q0;
    const uint32_t st = stage_q(t.step);
    auto load_rows = [&](uint32_t tile, const T* g, int64_t stride, int ncols) {
      const int c = lt % kChunks;
      const bool col_ok = c * 8 < ncols;
#pragma unroll 1
      for (int row = lt / kChunks; row < BQ; row += kLoaderThreads / kChunks) {
        const bool valid = col_ok && q0 + row < sq;
        cp_async_16(sw128_addr<BQ>(tile, row, c), valid ? g + (q0 + row) * stride + c * 8 : g,
                    valid);
      }
    };
    load_rows(st, q_batch + head * f.q_stride[2], f.q_stride[1], f.head_dim);
    load_rows(st + L::kTileQ, do_batch + head * f.o_stride[2], f.o_stride[1], f.head_dim_v);
    const int64_t row_off = (batch * f.heads_q + head) * rows_pad + q0;
    float* fl = stage_floats(t.step);
    load_floats_async(fl, lse2 + row_off, BQ, kLoaderFirst);
    load_floats_async(fl + BQ, delta + row_off, BQ, kLoaderFirst + BQ / 4);
  };

  // ---- the products of a step (bwd_wgmma_products.cuh) ------------------------------------
  float acc_dk[kColsPerWg / 2],
      acc_dv[kColsPerWg / 2];  // 64 x kColsPerWg accumulators, this thread's part
#pragma unroll
  for (int i = 0; i < kColsPerWg / 2; ++i) acc_dk[i] = acc_dv[i] = 0.f;
  auto dv_dk_products = [&](int step, const uint32_t(&pf)[KS][4], const uint32_t(&df)[KS][4]) {
    pr.dv_dk(acc_dv, acc_dk, step, pf, df);
  };
  auto dv_dk_products_ss = [&](int step) { pr.dv_dk_ss(acc_dv, acc_dk, step); };
  auto dq_products = [&](int step, float(&dq)[kHalves][kDqN / 2]) { pr.dq(dq, step); };
  const int q_first = pr.q_first;
  auto half = [&](int i) { return pr.half(i); };

  // ---- the element-wise phase: Pᵀ and dSᵀ (rows = keys, columns = queries) -------------
  // Pᵀ -> p_out, dSᵀ -> ds_out (f32; may alias s / dp).
  auto scores_to_grads = [&](Tile t, const float(&s)[kQueriesPerWg / 2],
                             const float(&dp)[kQueriesPerWg / 2], float(&p_out)[kQueriesPerWg / 2],
                             float(&ds_out)[kQueriesPerWg / 2]) {
    const int q0 = t.q0 + s_q_first;  // this warpgroup's first query column
    const float* sl = stage_floats(t.step) + s_q_first;
    // Tiles inside the mask band (all but the edges) take a loop without per-element
    // masks: a branch per element costs a convergence barrier each (measured: a quarter of
    // the stall samples at D = 64).
    auto grads = [&](auto masked) {
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const float2 l2 = *reinterpret_cast<const float2*>(sl + j * 8 + tig * 2);
        const float2 dl = *reinterpret_cast<const float2*>(sl + BQ + j * 8 + tig * 2);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float ds;
          float pv = grad.template eval<false, kSoftcap>(
              s[4 * j + e], dp[4 * j + e], (e & 1) ? l2.y : l2.x, (e & 1) ? dl.y : dl.x, ds);
          if constexpr (decltype(masked)::value) {
            const int row = q0 + j * 8 + tig * 2 + (e & 1);
            const int key = kw0 + g + (e >= 2 ? 8 : 0);
            if (!key_visible(mask, row, key)) pv = ds = 0.f;
          }
          p_out[4 * j + e] = pv;
          ds_out[4 * j + e] = ds;
        }
      }
    };
    const bool fully_visible =
        C::kMaskRowBounds ? full_rows.holds(q0, q0 + kQueriesPerWg - 1)
                          : tile_fully_visible(mask, q0, q0 + kQueriesPerWg - 1, kw0, kw0 + 15);
    if (fully_visible)
      grads(std::false_type{});
    else
      grads(std::true_type{});
  };

  // Columns 16kk..16kk+15 of an accumulator, rounded to T = the A fragment of k16 step kk.
  auto pack_fragment = [&](const float(&acc)[kQueriesPerWg / 2], uint32_t(&frag)[KP][4]) {
#pragma unroll
    for (int kk = 0; kk < KP; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        frag[kk][r] = pack2<T>(acc[8 * kk + 2 * r], acc[8 * kk + 2 * r + 1]);
  };
  // Pᵀ / dSᵀ fragments -> a shared [BK][BQ] tile (64-query panels, bwd_wgmma_products.cuh),
  // for products after the next barrier (the
  // caller fences the async proxy once its tiles are written).
  // stmatrix x4 writes k16 step kk's four 8x8 blocks (register r: rows +8·(r&1), columns
  // 16kk + 8·(r>>1)); lane l gives the address of row l%8 of block l/8.
  // kSplitD: rows of all 64 keys, this warpgroup's query columns (s_q_first / 8 chunks further).
  const int st_row = key_warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
  const int st_chunk = (lane >> 4) + s_q_first / 8;
  auto store_tile = [&](uint32_t tile, const uint32_t(&frag)[KP][4]) {
#pragma unroll
    for (int kk = 0; kk < KP; ++kk) {
      const int chunk = 2 * kk + st_chunk;
      const uint32_t addr =
          BQ == 32 ? sw64_addr(tile, st_row, chunk) : sw128_addr<BK>(tile, st_row, chunk);
      stmatrix_x4(addr, frag[kk][0], frag[kk][1], frag[kk][2], frag[kk][3]);
    }
  };

  // Until the copy engine has read the dQ tile of step − kDqStages, the last one before step
  // in step's tile (or stage, kDqInStage): use n = step / kDqStages waits for the read of use
  // n − 1 (a fresh barrier passes parity 1 at once).
  auto wait_dq_tile_read = [&](int step) {
    mbar_wait(dq_empty(step % L::kDqStages), ((step / L::kDqStages) & 1) ^ 1);
  };
  // dQᵀ fragment (d = 64·half + 16·warp + g (+8), q = q_first + 8j + 2·tig (+1)) -> the
  // staging tile [q][d], then "full" for the dQ warpgroup, which hands it to the copy engine.
  static_assert(L::kDqInStage == kSplitD, "only the kSplitD loop waits for a stage's dQ read");
  auto stage_dq = [&](Tile t, float(&dq)[kHalves][kDqN / 2]) {
    const int dq_st = t.step % L::kDqStages;
    float* const stg = dq_tile(t.step);
    // kDqInStage: the kSplitD loop waited before loading this stage.
    if constexpr (!L::kDqInStage) wait_dq_tile_read(t.step);
    clk.mark(kBwdPhDqTileWait);
#pragma unroll
    for (int i = 0; i < kHalves; ++i) {
      // Rows of D past the used columns are zero and have no place in the tile (warp-uniform).
      if constexpr (Pr::kUsedDim < D)
        if (64 * half(i) + wwarp * 16 >= Pr::kUsedDim) continue;
#pragma unroll
      for (int j = 0; j < kDqN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          stg[(q_first + 8 * j + 2 * tig + (e & 1)) * kDqRow + 64 * half(i) + wwarp * 16 + g +
              (e >= 2 ? 8 : 0)] = dq[i][4 * j + e];
    }
    bulk_fence_writes();
    mbar_arrive(dq_full(dq_st));
  };

  // ---- store dK·scale and dV ------------------------------------------------------------
  // Through shared memory: the accumulators' 4-byte pairs go straight to global memory as
  // 8 rows x 16 bytes per warp store, uncoalesced, which held the block ~10000 cycles (phase
  // trace, bench/RESULTS.md, session 30). Once every product of the block is done the K / V
  // tiles are free: dK goes into sK and dV into sV in their own swizzled layout (stmatrix:
  // accumulator n8 blocks 2jj, 2jj + 1, rows g and g + 8, as store_tile), then whole 16-byte
  // row chunks go out.
  bool k_nonfinite = false;  // this block's K holds a NaN or inf (bwd_ops.cuh)
  auto store_dk_dv = [&] {
    const int dkv_chunk = d_first / 8 + (lane >> 4);  // store_tile's lanes, dK / dV columns
    mma_sync();  // every warpgroup's products are done with sK / sV
    bool nan_key[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = kw0 + g + hr * 8;
      nan_key[hr] =
          k_nonfinite && row < skv && row_nonfinite(k + (int64_t)row * f.k_stride[1], f.head_dim);
    }
#pragma unroll
    for (int jj = 0; jj < kColsPerWg / 16; ++jj) {
      uint32_t dk_pairs[4], dv_pairs[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {  // r: row half r & 1 of n8 block 2jj + (r >> 1)
        const int a = 4 * (2 * jj + (r >> 1)) + 2 * (r & 1);
        dk_pairs[r] = pack2<T>(acc_dk[a] * f.scale, acc_dk[a + 1] * f.scale);
        dv_pairs[r] = pack2<T>(dv_of_key(nan_key[r & 1], acc_dk[a], acc_dv[a]),
                               dv_of_key(nan_key[r & 1], acc_dk[a + 1], acc_dv[a + 1]));
      }
      stmatrix_x4(sw128_addr<BK>(sK, st_row, dkv_chunk + 2 * jj), dk_pairs[0], dk_pairs[1],
                  dk_pairs[2], dk_pairs[3]);
      stmatrix_x4(sw128_addr<BK>(sV, st_row, dkv_chunk + 2 * jj), dv_pairs[0], dv_pairs[1],
                  dv_pairs[2], dv_pairs[3]);
    }
    mma_sync();  // the whole tiles are written
#pragma unroll 1
    for (int idx = tid; idx < BK * kChunks; idx += kThreads) {
      const int r = idx / kChunks, c = idx % kChunks, row = k0 + r;
      if (row >= skv) continue;
      if (c * 8 < f.head_dim)
        *reinterpret_cast<uint4*>(dk + (int64_t)row * f.k_stride[1] + c * 8) =
            lds128(sw128_addr<BK>(sK, r, c));
      if (c * 8 < f.head_dim_v)
        *reinterpret_cast<uint4*>(dv + (int64_t)row * f.v_stride[1] + c * 8) =
            lds128(sw128_addr<BK>(sV, r, c));
    }
  };
  if (steps == 0) {  // no query row sees these keys: zero gradients (block-uniform exit)
    if (tid < kThreads) store_dk_dv();
    return;
  }

  const int first_pos = rotate ? kv_block * rot_d : 0;
  const Tile first{
      0, kv_head * group + first_pos / tiles_per_head,
      walk_up ? qt_begin * BQ : (qt_begin + tiles_per_head - 1 - first_pos % tiles_per_head) * BQ,
      first_pos};
  // Who issues the TMA copies: the loader warps, except the first stages, which go out with K
  // and V from thread 0 (which initialised their barriers): the loader warps start only
  // after the block's first barrier below (+0-3 % at D = 128).
  const int early_steps = maps.use ? min(steps, L::kStages) : 0;
  if (tid == 0) {
    Tile t = first;
    for (int step = 0; step < early_steps; ++step, t = next_tile(t)) load_step_tma(t);
  }
  if (tid < kThreads) {  // the MMA warps load K and V (the loader warps, the other stages)
    load_sw128_async<BK, kChunks, kThreads>(sK, k, f.k_stride[1], k0, skv, f.head_dim);
    load_sw128_async<BK, kChunks, kThreads>(sV, v, f.v_stride[1], k0, skv, f.head_dim_v);
  }
  cp_async_commit();
  // A NaN or inf in this block's K: bwd_ops.cuh, "Non-finite keys" (once per block).
  cp_async_wait<0>();
  __syncthreads();
  k_nonfinite = quarantine_nonfinite_keys<T, BK>(
      sK, BK * kChunks * 16, [&](int r) { return sw128_addr<BK>(sV, r, 0); }, k, f.k_stride[1], k0,
      skv, f.head_dim);
  if (k_nonfinite) {
    fence_proxy_async_smem();  // the products read sK / sV through the async proxy
    __syncthreads();
  }
  // The dQ warp: takes each step's staging tile once the MMA warps have written it, adds
  // it into the slice with the copy engine (ordered mode: when the tile's counter says
  // it is this block's turn), frees the tile once read and releases the counter once the
  // add has completed. It walks the same tiles as the MMA warps (next_tile).
  {
    static_assert(C::kWarpGroups == 2 && C::kMinBlocks == 1, "the setmaxnreg budgets");
    if (tid >= kThreads) {
      warpgroup_reg_dealloc<kBwdDqWarpRegs>();
      if (tid >= kLoaderFirst) {  // the loader (see the stage barriers above)
        const int lt = tid - kLoaderFirst;
        if (maps.use && lt != 0) return;
        if (maps.use) {
          tma_prefetch_map(&maps.q);
          tma_prefetch_map(&maps.dout);
        }
        Tile t = first;
        for (int step = 0; step < early_steps; ++step) t = next_tile(t);
        clk.mark(kBwdPhPrologue);
        for (int step = early_steps; step < steps; ++step, t = next_tile(t)) {
          const int st = step % L::kStages;
          if constexpr (L::kDqInStage)
            wait_dq_tile_read(step);
          else
            mbar_wait(stage_empty(st), ((step / L::kStages) & 1) ^ 1);
          clk.mark(kBwdPhStageWait);
          if (maps.use) {
            load_step_tma(t);
          } else {
            load_step(t, lt);
            mbar_arrive_on_cp_async(stage_full(st));
          }
          clk.mark(kBwdPhIssue);
        }
        cp_async_commit();
        cp_async_wait<0>();
        return;
      }
      if (tid != kThreads) return;
      clk.mark(kBwdPhPrologue);
      Tile t = first;
      for (int step = 0; step < steps; ++step, t = next_tile(t)) {
        const int st = step % L::kDqStages;
        float* const dst = dq_slice + ((int64_t)t.head * rows_pad + t.q0) * kDqRow;
        unsigned* counter = nullptr;
        unsigned rank = 0, seen = 0;
        if (p.dq_ordered) {
          counter = dq_counter(t);
          rank = dq_rank(t);
          seen = load_counter(counter);
        }
        mbar_wait(dq_full(st), (step / L::kDqStages) & 1);
        clk.mark(kBwdPhIssue);
        if (p.dq_ordered) wait_counter(counter, rank, seen);
        clk.mark(kBwdPhDq);
        // Ordered mode: the tile's first add (rank 0) is a copy, so the accumulator needs no
        // zeroing (cuda_backend.cu); tiles no block adds into hold rows that see no key, which
        // bwd_dq_convert writes as 0 without reading.
        if (p.dq_ordered && rank == 0)
          bulk_store(dst, smem_addr(dq_tile(step)), kDqTile * 4);
        else
          bulk_reduce_add(dst, smem_addr(dq_tile(step)), kDqTile * 4);
        bulk_wait_read<0>();
        mbar_arrive(dq_empty(st));
        clk.mark(kBwdPhDvDk);
        if (p.dq_ordered) {
          bulk_wait_all();
          release_counter(counter);
          clk.mark(kBwdPhEpilogue);
        }
      }
      bulk_wait_all();  // every add performed before the exit
      return;
    }
    warpgroup_reg_alloc<kBwdMmaRegs>();
  }

  // Start of a step: its stage has landed (the loader's copies), visible to wgmma.
  auto begin_step = [&](int step) {
    mbar_wait(stage_full(step % L::kStages), (step / L::kStages) & 1);
    // The cp.async fallback's data is read by wgmma (async proxy); TMA's lands in the async
    // proxy already (the fence there cost 0-2 %, bench/RESULTS.md, session 29).
    if (!maps.use) fence_proxy_async_smem();
  };
  // Every MMA thread is done reading a step's stage: the loader may fill it again.
  auto release_stage = [&](int step) { mbar_arrive(stage_empty(step % L::kStages)); };
  // K / V rows of this warp as A fragments (C::kKvInRegs): k16 step kk of rows key_warp·16..
  // (ldmatrix x4: lane l addresses row l % 16, chunk 2kk + l / 16), once, after the
  // non-finite-key quarantine above has settled the tiles.
  uint32_t k_frag[kKvInRegs ? D / 16 : 1][4], v_frag[kKvInRegs ? D / 16 : 1][4];
  if constexpr (kKvInRegs) {
    const int frag_row = key_warp * 16 + (lane & 15), frag_chunk = lane >> 4;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      ldmatrix_x4(k_frag[kk], sw128_addr<BK>(sK, frag_row, 2 * kk + frag_chunk));
      ldmatrix_x4(v_frag[kk], sw128_addr<BK>(sV, frag_row, 2 * kk + frag_chunk));
    }
  }
  auto sdp_products = [&](int step, float(&s)[kQueriesPerWg / 2], float(&dp)[kQueriesPerWg / 2]) {
    pr.keys_times_queries_t(s, sK, k_frag, stage_q(step));
    pr.keys_times_queries_t(dp, sV, v_frag, stage_q(step) + L::kTileQ);
  };

  // Pᵀ and dSᵀ (f32) -> the step's shared tiles, rounded to T (kSplitD).
  auto store_grads = [&](int step, const float(&pt)[kQueriesPerWg / 2],
                         const float(&dst)[kQueriesPerWg / 2]) {
    uint32_t frag[KP][4];
    pack_fragment(pt, frag);
    store_tile(pt_tile(step), frag);
    pack_fragment(dst, frag);
    store_tile(ds_tile(step), frag);
    fence_proxy_async_smem();  // the tiles are read by wgmma (after a barrier)
  };

  clk.mark(kBwdPhPrologue);
  if constexpr (kSplitD) {
    // Serial order with shared Pᵀ / dSᵀ (D = 256):
    //   Sᵀ/dPᵀ(i) | element-wise(i) | load (i+1) | barrier | dV/dK/dQᵀ(i) | barrier | stage dQ(i)
    // The second barrier: no warpgroup overwrites the stage with dQ while the other's dK / dV
    // products still read its Q / dO. The next step's stage is step − 1's dQ tile (kDqStages
    // == kStages): the loader fills it once the copy engine has read that tile.
    Tile cur = first;
    for (int step = 0; step < steps; ++step) {
      begin_step(step);
      clk.mark(kBwdPhStageWait);
      float s[kQueriesPerWg / 2], dp[kQueriesPerWg / 2], dq[kHalves][kDqN / 2];
      wgmma_fence();
      sdp_products(step, s, dp);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(s);
      wgmma_fence_operands(dp);
      clk.mark(kBwdPhSdp);
      scores_to_grads(cur, s, dp, s, dp);
      store_grads(step, s, dp);
      clk.mark(kBwdPhGrads);
      mma_sync();  // the whole Pᵀ and dSᵀ tiles are written
      clk.mark(kBwdPhDsBarrier);
      wgmma_fence();
      dv_dk_products_ss(step);
      dq_products(step, dq);
      wgmma_commit();
      wgmma_wait<0>();
      clk.mark(kBwdPhDvDk);  // dV, dK and dQᵀ together here
#pragma unroll
      for (int i = 0; i < kHalves; ++i) wgmma_fence_operands(dq[i]);
      mma_sync();  // both warpgroups' dK / dV products have read this stage
      clk.mark(kBwdPhBarrier);
      stage_dq(cur, dq);
      clk.mark(kBwdPhStageDq);
      cur = next_tile(cur);
    }
  } else {
    static_assert(L::kPingPong, "the remaining order: own keys, serial");
    // Ping-pong order (D = 64, 128): the warpgroups take turns issuing their product groups, so
    // one's element-wise phase runs while the other's products hold the tensor cores:
    //   Sᵀ/dPᵀ(i) | element-wise(i), dSᵀ rows | dV/dK(i) | dQᵀ(i) | stage dQ(i)
    // each group on this warpgroup's turn (named barrier kBwdTurnBarrier0 + wg, passed by the
    // other's arrival; warpgroup 0 goes first, warpgroup 1 a group behind). The dSᵀ tile has
    // mbarriers instead of block-wide meetings: full (both warpgroups' rows written) before
    // dQᵀ, empty (both warpgroups' dQᵀ products read it) before the next step's rows.
    // Every turn taken is passed once: warpgroup 1 passes one before it starts and does not
    // pass its last, which nobody takes. Against the serial order of before (the warpgroups'
    // phases side by side, meeting at block barriers; bench/RESULTS.md, session 29): +3-6 %
    // (2k-16k, causal or not, deterministic or atomic). Softcap's element-wise phase outlasts
    // the other's products, and strict turns made it 6-10 % slower: it runs without turns.
    constexpr bool kTurns = !kSoftcap;
    const int turn_mine = kBwdTurnBarrier0 + wg, turn_other = kBwdTurnBarrier0 + (wg ^ 1);
    const auto take_turn = [&] {
      if constexpr (kTurns) named_barrier_sync(turn_mine, kThreads);
    };
    const auto pass_turn = [&] {
      if constexpr (kTurns) named_barrier_arrive(turn_other, kThreads);
    };
    if (wg == 1) pass_turn();
    Tile cur = first;
    for (int step = 0; step < steps; ++step) {
      begin_step(step);
      clk.mark(kBwdPhStageWait);
      float s[kQueriesPerWg / 2], dp[kQueriesPerWg / 2], dq[kHalves][kDqN / 2];
      take_turn();
      wgmma_fence();
      sdp_products(step, s, dp);
      wgmma_commit();
      pass_turn();
      wgmma_wait<0>();
      wgmma_fence_operands(s);
      wgmma_fence_operands(dp);
      clk.mark(kBwdPhSdp);
      scores_to_grads(cur, s, dp, s, dp);
      uint32_t pf[KS][4], df[KS][4];
      pack_fragment(s, pf);
      pack_fragment(dp, df);
      // Both warpgroups' dQᵀ(step − 1) products have read the tile (a fresh barrier passes
      // parity 1 at once).
      mbar_wait(ds_empty(step), ((step / L::kDsTiles) & 1) ^ 1);
      store_tile(ds_tile(step), df);
      fence_proxy_async_smem();  // the tile is read by wgmma (after ds_full)
      mbar_arrive(ds_full(step));
      clk.mark(kBwdPhGrads);
      take_turn();
      wgmma_fence();
      dv_dk_products(step, pf, df);
      wgmma_commit();
      pass_turn();
      // Pᵀ / dSᵀ fragments free their registers for dQᵀ (the register budget).
      wgmma_wait<0>();
      release_stage(step);  // this warpgroup's reads of the step's Q / dO are done
      clk.mark(kBwdPhDvDk);
      mbar_wait(ds_full(step), (step / L::kDsTiles) & 1);  // the other's dSᵀ rows
      clk.mark(kBwdPhDsBarrier);
      take_turn();
      wgmma_fence();
      dq_products(step, dq);
      wgmma_commit();
      if (wg == 0 || step + 1 < steps) pass_turn();
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < kHalves; ++i) wgmma_fence_operands(dq[i]);
      mbar_arrive(ds_empty(step));
      clk.mark(kBwdPhDq);
      stage_dq(cur, dq);
      clk.mark(kBwdPhStageDq);
      cur = next_tile(cur);
    }
  }
  wgmma_fence_operands(acc_dk);
  wgmma_fence_operands(acc_dv);
  store_dk_dv();
  clk.mark(kBwdPhEpilogue);
#else
  __trap();  // chosen only where sm_90a code exists (bwd_wgmma_usable)
#endif
}

}  // namespace flash::cuda
