// Split-KV decode forward on tensor cores (f16/bf16): the decode_split_kernel of
// decode_kernel.cuh with both products on mma.sync m16n8k16. One query token is
// memory-bound; from 16 packed rows per kv head (GQA heads x query tokens) on, each warp's
// work per key tile bounds it (bench/RESULTS.md, session 24).
//
// A block owns (split, kv head, row chunk, sequence), as in decode_kernel.cuh; a row chunk
// is one m16 row tile, or two (32 rows) that share every K/V tile, so K/V are read once per 32
// rows: for 17-64 packed rows at head dims <= 128 where each warp streams enough key tiles per
// split (decode.hpp, decode_plan.cu; FLASH_CUDA_DECODE_ROWS overrides it for A/B). Q (the chunk's
// rows, zero-padded) sits in shared memory for the whole block; each warp streams its own kKeys-key
// K and V tiles through a cp.async ring of kStages stages (swizzled tiles, ldmatrix reads),
// computes S = Q·Kᵀ (kM x kKeys), the online softmax on the accumulators (exact exponent form; with
// two tiles no per-score mask on a tile every row sees whole, no O rescale when no row max of the
// warp moved), and O += P·V with P in registers, each K / V fragment loaded once for the row tiles.
// K/V rows are addressed per key (the lane of a key looks up its page two tiles ahead of the tile's
// copies; the warp shares the row offsets through shuffles). A tile where some (row, key) pair is
// masked and V holds a NaN or inf takes a scalar P·V that skips p = 0, so a hidden key's V never
// reaches a row (value chunk by value chunk, one 32-bit V read per key: no register spills). Warps
// are combined in shared memory; one split writes o/lse, more write f32 partials that the unit's
// last block merges (decode_merge_if_last), or, launched as one cluster per unit (sm_90, when the
// clusters fit in one wave), store each column slice into the shared memory of the block that owns
// it (decode_cluster_merge). Tolerance class: bf16/f16 P and inputs into f32 accumulators (as the
// forward kernels). Speed (H200, bf16, Hkv 8, B 8, >= 32k keys, of a device copy): one token
// 1.01-1.09 at D 128 (Hq 32), 1.06-1.08 at D 256; Hq 64 x 4 tokens 0.91-1.02 (bench/RESULTS.md,
// session 25). Run: FLASH_LOG=1 names decode_mma_* kernels; flashattn-decode-bench.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "decode_kernel.cuh"
#include "dispatch/backend_adapter.hpp"
#include "fwd_tile_ops.cuh"

namespace flash::cuda {

// Tuning builds may override the warp tile (keys) and the most warps per block. 16-key
// tiles and 8 warps (two per scheduler) measured 1-2 % above 32-key tiles and 4 warps at
// every decode shape (bench/RESULTS.md, 2026-11-24).
#ifndef FLASH_DECODE_TILE_KEYS
#define FLASH_DECODE_TILE_KEYS 16
#endif
#ifndef FLASH_DECODE_MAX_WARPS
#define FLASH_DECODE_MAX_WARPS 8
#endif
// Shared memory for a block's K/V rings, KiB (tuning builds: 96 fits two blocks per SM).
#ifndef FLASH_DECODE_RING_KB
#define FLASH_DECODE_RING_KB 192
#endif

template <class T, int kDim_, int kRowTiles_ = 1>
struct DecodeMmaShape {
  static constexpr int kDim = kDim_;
  static constexpr int kRowTiles = kRowTiles_;          // m16 row tiles sharing each K/V tile
  static constexpr int kM = 16 * kRowTiles;             // query rows per block
  static constexpr int kKeys = FLASH_DECODE_TILE_KEYS;  // keys per warp tile
  static constexpr int kChunks = kDim / 8;              // 16-byte chunks per row
  static constexpr int kTileBytes = kKeys * kDim * 2;
  static constexpr int kStageBytes = 2 * kTileBytes;  // K and V
  static constexpr int kRingBudget = FLASH_DECODE_RING_KB * 1024;
  // The most warps (FLASH_DECODE_MAX_WARPS, then halved) for which two stages fit; then
  // as many stages (<= 4) as fit.
  static constexpr int kMaxWarps = FLASH_DECODE_MAX_WARPS;
  static constexpr int kWarps = kMaxWarps * 2 * kStageBytes <= kRingBudget       ? kMaxWarps
                                : kMaxWarps / 2 * 2 * kStageBytes <= kRingBudget ? kMaxWarps / 2
                                                                                 : kMaxWarps / 4;
  static constexpr int kStagesFit = kRingBudget / (kWarps * kStageBytes);
  static constexpr int kStages = kStagesFit > 4 ? 4 : kStagesFit;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kQBytes = kM * kDim * 2;
  static constexpr int kRingBytes = kWarps * kStages * kStageBytes;
  static constexpr int kCombineBytes = kWarps * kM * (kDim + 2) * 4;
  static constexpr int kSmemBytes =
      kQBytes + (kRingBytes > kCombineBytes ? kRingBytes : kCombineBytes);
  // A cluster launch adds the merge's receive area past the ring (DecodeRecv).
  static constexpr int kClusterSmemBytes = kSmemBytes + DecodeRecv<kDim, kM>::kBytes;
  static_assert(kSmemBytes % 16 == 0, "the receive barrier is 8-byte aligned");
  static_assert(kClusterSmemBytes <= 227 * 1024, "a block fits an sm_90 SM's shared memory");
  static_assert(kStages >= 2, "a ring needs two stages");
  static_assert(kKeys % 16 == 0 && kWarps >= 1, "whole k16 steps of P·V; at least a warp");
  static_assert(kChunks % 4 == 0, "swizzled rows are multiples of 64 bytes");
  static_assert((kKeys * kChunks) % 32 == 0, "whole copies per lane");
  static_assert(kRowTiles == 1 || (kRowTiles == 2 && kDim <= kDecodeTwoTileMaxDim),
                "two row tiles' O accumulators (kDim floats a lane) fit the registers");
};

template <class T, class S>
__global__ void __launch_bounds__(S::kThreads) decode_mma_kernel(const DecodeParams dp) {
  constexpr int D = S::kDim, M = S::kM, RT = S::kRowTiles, W = S::kWarps, KT = S::kKeys,
                KC = S::kChunks;
  constexpr int NT = KT / 8, OT = D / 8;  // n8 tiles of S and of O
  const FwdParams& p = dp.f;
  extern __shared__ __align__(128) unsigned char decode_smem[];
  const uint32_t sQ = smem_addr(decode_smem);
  unsigned char* ring = decode_smem + S::kQBytes;

  const int split = blockIdx.x;
  const int kv_head = blockIdx.y % dp.heads_kv, chunk = blockIdx.y / dp.heads_kv;
  const int64_t b = (int64_t)blockIdx.z + p.batch_offset;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, tig = lane % 4;
  const SequenceRows seq = sequence_rows(p, b, 0);
  const MaskParams& mask = seq.mask;
  const int rows_total = mask.seqlen_q * p.group, row0 = chunk * M;
  if (row0 >= rows_total) return;  // uniform over the block and its cluster (same unit)
  decode_trace(DecodeMark::start);
  unsigned char* recv = decode_smem + S::kSmemBytes;  // cluster launches only
  if (dp.cluster > 1) decode_cluster_prologue<D, M>(dp, recv, min(M, rows_total - row0));

  const int skv = mask.seqlen_kv;
  const int per_split = ((skv + dp.splits - 1) / dp.splits + KT - 1) / KT * KT;
  const int row_last = min(row0 + M, rows_total) - 1;
  const KeyRange seen = visible_keys(mask, row0 / p.group, row_last / p.group);
  const int k_begin = max(split * per_split, seen.begin);
  const int k_end = min(min(split * per_split + per_split, skv), seen.end);

  // Q: M packed rows (query token r / group of head kv_head·group + r % group).
  const T* qg = static_cast<const T*>(p.q);
  for (int idx = tid; idx < M * KC; idx += S::kThreads) {
    const int m = idx / KC, c = idx % KC, r = row0 + m;
    const bool ok = r < rows_total && c * 8 < p.head_dim;
    const DecodeRow row = decode_row(ok ? r : row0, kv_head, p.group);
    const T* src =
        qg + seq.q + (int64_t)row.i * p.q_stride[1] + (int64_t)row.head * p.q_stride[2] + c * 8;
    cp_async_16(tile_addr<KC>(sQ, m, c), ok ? src : qg, ok);
  }
  cp_async_commit();

  // Visible keys [lo, hi) of this lane's rows (g and g + 8 of each row tile t); empty past
  // the last row. Rows past the last (padding of the m16 tiles) are never written, so their
  // masked keys do not need the exact P·V below: `real` keeps them out of `partial` (a decode
  // step's 4 rows of 16 would otherwise take the V check on every tile).
  int lo[RT][2], hi[RT][2];
  bool real[RT][2];
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 16 * t + g + 8 * h;
      real[t][h] = r < rows_total;
      const KeyRange kr =
          real[t][h] ? visible_keys(mask, r / p.group, r / p.group) : KeyRange{0, 0};
      lo[t][h] = kr.begin;
      hi[t][h] = kr.end;
    }
  // Keys every real row of the chunk sees, below k_end: [all_lo, all_hi) (a row's visible
  // range moves up with its query token).
  const int all_lo = visible_keys(mask, row_last / p.group, row_last / p.group).begin;
  const int all_hi = min(visible_keys(mask, row0 / p.group, row0 / p.group).end, k_end);

  const bool use_softcap = p.softcap > 0.f;
  const float mult = use_softcap ? kLog2e : p.scale * kLog2e;
  const float cap_in = use_softcap ? p.scale / p.softcap : 0.f;

  float acc[RT][OT][4], row_max[RT][2], row_sum[RT][2];
#pragma unroll
  for (int t = 0; t < RT; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) row_max[t][h] = -INFINITY, row_sum[t][h] = 0.f;
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[t][nt][e] = 0.f;
  }

  const int tiles = k_begin < k_end ? (k_end - k_begin + KT - 1) / KT : 0;
  const int my_tiles = tiles > warp ? (tiles - warp + W - 1) / W : 0;
  const T* kg = static_cast<const T*>(p.k);
  const T* vg = static_cast<const T*>(p.v);
  const uint32_t my_ring = smem_addr(ring + warp * S::kStages * S::kStageBytes);
  const LdsmAddr<KC> q_addr(sQ, lane & 15, lane >> 4);
  const LdsmAddr<KC> k_addr(my_ring, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
  const LdsmAddr<KC> v_addr(my_ring + S::kTileBytes, (lane & 7) + (((lane >> 3) & 1) << 3),
                            lane >> 4);

  // The key this lane addresses in the warp's n-th tile, and its page (paged caches).
  const auto tile_key = [&](int n) { return k_begin + (warp + W * n) * KT + lane; };
  const auto tile_page = [&](int n) { return key_page(dp, b, tile_key(n), k_end); };
  // Issues the copies of the warp's n-th tile, whose page ids the lanes looked up
  // beforehand (`page`), into stage n % kStages.
  auto load_tile = [&](int n, int page) {
    const uint32_t ks = my_ring + (n % S::kStages) * S::kStageBytes, vs = ks + S::kTileBytes;
    const KeyRowOffsets row =
        key_row_offsets(dp, seq, kv_head, tile_key(n), k_end, static_cast<int64_t>(page));
    const bool ok = row.ok;
    const int64_t k_off = row.k, v_off = row.v;
#pragma unroll
    for (int it = 0; it < KT * KC / 32; ++it) {
      const int idx = it * 32 + lane, r = idx / KC, c = idx % KC;
      const bool row_ok = __shfl_sync(0xffffffffu, ok, r);
      const int64_t kr = __shfl_sync(0xffffffffu, k_off, r);
      const int64_t vr = __shfl_sync(0xffffffffu, v_off, r);
      const bool k_ok = row_ok && c * 8 < p.head_dim, v_ok = row_ok && c * 8 < p.head_dim_v;
      cp_async_16(tile_addr<KC>(ks, r, c), kg + (k_ok ? kr + c * 8 : 0), k_ok);
      cp_async_16(tile_addr<KC>(vs, r, c), vg + (v_ok ? vr + c * 8 : 0), v_ok);
    }
  };
  // Whether any chunk this lane copied into V of stage `stage` holds a NaN or inf.
  auto own_v_nonfinite = [&](int stage) {
    const uint32_t vs = my_ring + stage * S::kStageBytes + S::kTileBytes;
    bool bad = false;
#pragma unroll
    for (int it = 0; it < KT * KC / 32; ++it) {
      const int idx = it * 32 + lane;
      bad |= has_nonfinite<T>(lds128(tile_addr<KC>(vs, idx / KC, idx % KC)));
    }
    return bad;
  };

  // Paged caches: the split's block-table lines go to L2 at once (after the read flush of a
  // timed decode they would each come from DRAM, behind the K/V stream, when first used).
  if (dp.block_table && k_begin < k_end) {
    const int* table = dp.block_table + b * dp.pages_per_seq;
    const uintptr_t line0 = reinterpret_cast<uintptr_t>(table + k_begin / dp.page_size) / 128;
    const uintptr_t line1 = reinterpret_cast<uintptr_t>(table + (k_end - 1) / dp.page_size) / 128;
    for (uintptr_t line = line0 + tid; line <= line1; line += S::kThreads)
      prefetch_l2(reinterpret_cast<const void*>(line * 128));
  }
  // The first tiles' page ids are looked up together (one round trip, not one per tile),
  // then their copies issued.
  int first_pages[S::kStages - 1];
#pragma unroll
  for (int n = 0; n < S::kStages - 1; ++n) first_pages[n] = tile_page(n);
#pragma unroll
  for (int n = 0; n < S::kStages - 1; ++n) {
    if (n < my_tiles) load_tile(n, first_pages[n]);
    cp_async_commit();
  }
  // Page ids of the next two tiles to load: each looked up two tiles before its copies are
  // issued, so the block-table read (an L2 round trip, or DRAM) overlaps the tiles' products
  // and waits instead of holding back the copies (+1-2 % over one tile ahead, H100). As
  // compiled, the id is copied into the next iteration's register at the loop's back edge,
  // so the warp waits for it one iteration after the load (SASS, session 31; unrolling by
  // two to remove the copy measured the same). A paged cache executes 13 % more instructions
  // than a contiguous one (ncu); advancing page and row without the two divisions per tile
  // cut that to 5 % at equal speed, so the simpler form stays (bench/RESULTS.md, session 15).
  int next_page = tile_page(S::kStages - 1), after_page = tile_page(S::kStages);
  // Q (copied by the whole block, the oldest group) visible to every warp: one barrier
  // that all threads reach, whatever their tile count (a barrier inside the tile loop
  // would be reached by some warps only: synccheck's divergent barrier).
  cp_async_wait<S::kStages - 1>();
  __syncthreads();
  for (int n = 0; n < my_tiles; ++n) {
    if (n + S::kStages - 1 < my_tiles) {
      load_tile(n + S::kStages - 1, next_page);
      next_page = after_page;
      after_page = tile_page(n + S::kStages + 1);
    }
    cp_async_commit();
    cp_async_wait<S::kStages - 1>();
    __syncwarp();
    const int stage_off = (n % S::kStages) * S::kStageBytes;
    const int k0 = k_begin + (warp + W * n) * KT;

    // ---- S = Q·Kᵀ: M rows x KT keys (each K fragment loaded once for the row tiles) ----
    float s[RT][NT][4];
#pragma unroll
    for (int t = 0; t < RT; ++t)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[t][nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[RT][4];
#pragma unroll
      for (int t = 0; t < RT; ++t) ldmatrix_x4(a[t], q_addr(16 * t, kk * 2));
#pragma unroll
      for (int nt2 = 0; nt2 < NT / 2; ++nt2) {
        uint32_t bk[4];
        ldmatrix_x4(bk, k_addr(nt2 * 16, kk * 2) + stage_off);
#pragma unroll
        for (int t = 0; t < RT; ++t) {
          mma_16816<T>(s[t][2 * nt2], a[t], bk[0], bk[1]);
          mma_16816<T>(s[t][2 * nt2 + 1], a[t], bk[2], bk[3]);
        }
      }
    }
    // ---- softcap, mask, online softmax (rows g and g + 8 of each row tile) -------------
    // With two row tiles (a multi-token decode, bound by issued instructions, not bytes) a
    // tile whose keys every real row of the chunk sees (below k_end) takes no per-score
    // mask, and O is rescaled only when some row max of the warp moved. One tile keeps the
    // plain path: the two cuts measured 1-2 % slower there (bench/RESULTS.md, session 25).
    const bool interior = RT > 1 && k0 >= all_lo && k0 + KT <= all_hi;
    bool partial = false;  // some pair of a key below k_end masked for some real row
    float alpha[RT][2];
    const auto softmax = [&](auto masked) {
#pragma unroll
      for (int t = 0; t < RT; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float x = s[t][nt][2 * h + e];
              if (use_softcap) x = p.softcap * tanhf(x * cap_in);
              if constexpr (decltype(masked)::value) {
                const int key = k0 + nt * 8 + tig * 2 + e;
                const bool visible = key < k_end && key >= lo[t][h] && key < hi[t][h];
                partial |= real[t][h] && key < k_end && !visible;
                x = visible ? x : -INFINITY;
              }
              s[t][nt][2 * h + e] = x;
              mx = fmaxf(mx, x);
            }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          float max_used;
          online_softmax_max(row_max[t][h], mx, mult, max_used, alpha[t][h]);
          float sum = 0.f;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pr = softmax_p(s[t][nt][2 * h + e], max_used, mult);
              s[t][nt][2 * h + e] = pr;
              sum += pr;
            }
          row_sum[t][h] = row_sum[t][h] * alpha[t][h] + sum;  // per-thread partial
        }
    };
    if (interior)
      softmax(std::false_type{});
    else
      softmax(std::true_type{});
    rescale_o<(RT > 1)>(acc, alpha);  // lazy with two tiles only (see above)
    // ---- O += P·V ----------------------------------------------------------------------
    const bool exact = __any_sync(0xffffffffu, partial) &&
                       __any_sync(0xffffffffu, own_v_nonfinite(n % S::kStages));
    if (exact) {
      // Scalar P·V: per value chunk ot, key by key (one 32-bit V read per key), so that
      // only one chunk's loads are in flight beside both tiles' O.
      const uint32_t vs = my_ring + stage_off + S::kTileBytes;
#pragma unroll
      for (int ot = 0; ot < OT; ++ot) {
#pragma unroll 1
        for (int j = 0; j < KT; ++j) {
          const int nt = j / 8, c = j % 8, src = 4 * g + c / 2;
          const float2 v = unpack2<T>(lds32(tile_addr<KC>(vs, j, ot) + tig * 4));
#pragma unroll
          for (int t = 0; t < RT; ++t) {
            float mine0 = 0.f, mine1 = 0.f;
#pragma unroll
            for (int n8 = 0; n8 < NT; ++n8)
              if (n8 == nt) {
                mine0 = (c & 1) ? s[t][n8][1] : s[t][n8][0];
                mine1 = (c & 1) ? s[t][n8][3] : s[t][n8][2];
              }
            const float p0 = __shfl_sync(0xffffffffu, mine0, src);
            const float p1 = __shfl_sync(0xffffffffu, mine1, src);
            if (p0 != 0.f) {
              acc[t][ot][0] = fmaf(p0, v.x, acc[t][ot][0]);
              acc[t][ot][1] = fmaf(p0, v.y, acc[t][ot][1]);
            }
            if (p1 != 0.f) {
              acc[t][ot][2] = fmaf(p1, v.x, acc[t][ot][2]);
              acc[t][ot][3] = fmaf(p1, v.y, acc[t][ot][3]);
            }
          }
        }
      }
    } else {
      uint32_t pf[RT][KT / 16][4];
#pragma unroll
      for (int t = 0; t < RT; ++t)
#pragma unroll
        for (int kk = 0; kk < KT / 16; ++kk) {
          pf[t][kk][0] = pack2<T>(s[t][2 * kk][0], s[t][2 * kk][1]);
          pf[t][kk][1] = pack2<T>(s[t][2 * kk][2], s[t][2 * kk][3]);
          pf[t][kk][2] = pack2<T>(s[t][2 * kk + 1][0], s[t][2 * kk + 1][1]);
          pf[t][kk][3] = pack2<T>(s[t][2 * kk + 1][2], s[t][2 * kk + 1][3]);
        }
#pragma unroll
      for (int kk = 0; kk < KT / 16; ++kk)
#pragma unroll
        for (int nt2 = 0; nt2 < OT / 2; ++nt2) {
          uint32_t bv[4];
          ldmatrix_x4_trans(bv, v_addr(kk * 16, nt2 * 2) + stage_off);
#pragma unroll
          for (int t = 0; t < RT; ++t) {
            mma_16816<T>(acc[t][2 * nt2], pf[t][kk], bv[0], bv[1]);
            mma_16816<T>(acc[t][2 * nt2 + 1], pf[t][kk], bv[2], bv[3]);
          }
        }
    }
    __syncwarp();  // this stage is refilled by a later load_tile
  }
  cp_async_wait<0>();
  decode_trace(DecodeMark::streamed);

  // ---- combine the warps in shared memory: O, max, sum per row ------------------------
  __syncthreads();                               // every warp is done with its ring
  float* comb = reinterpret_cast<float*>(ring);  // [W][M][D + 2]
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[t][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      float* dst = comb + (warp * M + 16 * t + g + 8 * h) * (D + 2);
#pragma unroll
      for (int nt = 0; nt < OT; ++nt) {
        dst[nt * 8 + tig * 2] = acc[t][nt][2 * h];
        dst[nt * 8 + tig * 2 + 1] = acc[t][nt][2 * h + 1];
      }
      if (tig == 0) {
        dst[D] = row_max[t][h];
        dst[D + 1] = l;
      }
    }
  __syncthreads();
  decode_block_epilogue<T, D, M, W>(dp, comb, seq, b, kv_head, chunk, split, rows_total, mult,
                                    recv);
  decode_trace(DecodeMark::end);
}

// Whether kernel kKernel is launched on the current device for the first time: kernel
// attributes belong to a device's context, so each device gets its cudaFuncSetAttribute
// calls once (a driver call per launch would show at decode sizes, where a call takes tens
// of microseconds).
template <auto kKernel>
bool first_use_on_this_device() {
  static std::atomic<uint64_t> seen{0};  // bit d: device d done (devices 64 and up: every call)
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();  // the launch reports a device without a context itself
    return false;
  }
  if (device >= 64) return true;
  const uint64_t bit = uint64_t{1} << device;
  return (seen.fetch_or(bit, std::memory_order_relaxed) & bit) == 0;
}

// Raises a kernel's dynamic shared-memory limit (once per device).
template <auto kKernel>
void allow_dynamic_smem(int bytes) {
  if (first_use_on_this_device<kKernel>())
    (void)cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

// The launch configuration of a decode grid: splits x (kv heads · row chunks) x sequences,
// with clusters of dp.cluster blocks along the splits when dp.cluster > 1.
struct DecodeLaunch {
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute cluster{};
  DecodeLaunch(const DecodeParams& dp, int sequences, int threads, int smem, cudaStream_t stream) {
    config.gridDim = dim3(dp.splits, dp.heads_kv * dp.row_chunks, sequences);
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    if (dp.cluster > 1) {
      cluster.id = cudaLaunchAttributeClusterDimension;
      cluster.val.clusterDim.x = dp.cluster;
      cluster.val.clusterDim.y = 1;
      cluster.val.clusterDim.z = 1;
      config.attrs = &cluster;
      config.numAttrs = 1;
    }
  }
};

// The tensor-core decode kernel's attributes, once per device: its dynamic shared-memory
// limit (the cluster launch's, where the device has that much) and cluster sizes up to
// kDecodeMaxCluster (above 8 is non-portable). A refused setting is cleared from the
// runtime's last error (the launch check reads it), and the plan never asks for it.
template <class T, class S>
void allow_decode_clusters() {
  constexpr auto kernel = decode_mma_kernel<T, S>;
  if (!first_use_on_this_device<kernel>()) return;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           S::kClusterSmemBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes);
  }
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
      cudaSuccess)
    (void)cudaGetLastError();
}

// cudaOccupancyMaxActiveClusters for the tensor-core kernel of head dim kD and kRowTiles
// m16 row tiles (0 on error).
template <class T, int kD, int kRowTiles>
int decode_max_active_clusters_for(int cluster) {
  using S = DecodeMmaShape<T, kD, kRowTiles>;
  allow_decode_clusters<T, S>();
  DecodeParams dp{};
  dp.splits = dp.cluster = cluster;
  dp.heads_kv = dp.row_chunks = 1;
  DecodeLaunch launch(dp, 1, S::kThreads, S::kClusterSmemBytes, nullptr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, decode_mma_kernel<T, S>, &launch.config) !=
      cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it for the next call's check
    return 0;
  }
  return clusters;
}

// Launches the decode kernel of a dtype: f16/bf16 on tensor cores (rows per block 16, or
// 32 at head dims <= 128), f32 on the plain-FMA decode_split_kernel (rows per block 4 or
// 16): decode.hpp's decode_rows.
template <class T>
void launch_decode_for(const DecodeParams& dp, int dim, int rows, int batch, cudaStream_t stream) {
  // Sequences on grid z, in launches of at most 65535.
  const auto run = [&](auto kernel, int threads, int smem) {
    for (int b0 = 0; b0 < batch; b0 += 65535) {
      DecodeParams part = dp;
      part.f.batch_offset = b0;
      DecodeLaunch launch(dp, std::min(batch - b0, 65535), threads, smem, stream);
      decode_trace_before_launch(stream);
      (void)cudaLaunchKernelEx(&launch.config, kernel, part);  // errors: the caller's check
      decode_trace_after_launch(stream);
    }
  };
  const auto shape = [&](auto dim_tag, auto rows_tag) {
    constexpr int kD = decltype(dim_tag)::value, kM = decltype(rows_tag)::value;
    if constexpr (std::is_same_v<T, float>) {
      using S = DecodeShape<T, kD, kM>;
      allow_dynamic_smem<decode_split_kernel<T, S>>(S::kSmemBytes);
      run(decode_split_kernel<T, S>, S::kThreads, S::kSmemBytes);
    } else {
      using S = DecodeMmaShape<T, kD, kM / kDecodeRowsLarge>;
      allow_decode_clusters<T, S>();  // the larger limit serves both launches
      run(decode_mma_kernel<T, S>, S::kThreads,
          dp.cluster > 1 ? S::kClusterSmemBytes : S::kSmemBytes);
    }
  };
  using Small = std::integral_constant<int, kDecodeRowsSmall>;
  using Large = std::integral_constant<int, kDecodeRowsLarge>;
  using TwoTiles = std::integral_constant<int, kDecodeRowsTwoTiles>;
  const auto by_rows = [&](auto dim_tag) {
    if constexpr (std::is_same_v<T, float>) {
      if (rows == kDecodeRowsSmall) return shape(dim_tag, Small{});
    } else if constexpr (decltype(dim_tag)::value <= kDecodeTwoTileMaxDim) {
      if (rows == kDecodeRowsTwoTiles) return shape(dim_tag, TwoTiles{});
    }
    // Every other pairing returned above; decode_rows never pairs 32 rows with f32 or a
    // wider dim (a 16-row launch would skip rows, unseen).
    if (rows != kDecodeRowsLarge)
      throw flash::detail::RuntimeFailure("cuda backend: internal: no decode kernel of " +
                                          std::to_string(rows) + " rows per block at head dim " +
                                          std::to_string(dim));
    shape(dim_tag, Large{});
  };
  switch (dim) {
    case 64:
      return by_rows(std::integral_constant<int, 64>{});
    case 128:
      return by_rows(std::integral_constant<int, 128>{});
    default:
      return by_rows(std::integral_constant<int, 256>{});
  }
}

}  // namespace flash::cuda
