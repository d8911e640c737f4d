// bf16 backward attention on AVX512-BF16 (vdpbf16ps: 16 f32 lanes, each += 2 bf16
// products): the dK/dV and dQ work items of the avx512bf16 and amx targets.
//
// Algorithm: the backward of backward-inl.h (same Plan, items, passes, delta pass,
// BackwardScores: P from lse, dS = P∘(dP − D), masks and softcap in f32), with its seven
// tile products on vdpbf16ps (avx512bf16_microkernel.h). Each product needs its
// operands as bf16 pairs along its reduction dimension:
//   pass 1, item = (batch, kv head, up to 4 K/V tiles), per q tile of one head:
//     Sᵀ = K·Qᵀ·scale   A = K rows (pairs along head_dim), B = Qᵀ pairs [d/2][row]
//     dPᵀ = V·dOᵀ       A = V rows, B = dOᵀ pairs [dv/2][row]
//     dV += Pᵀ·dO       A = Pᵀ rows rounded to bf16 (pairs of consecutive query rows),
//                       B = dO as pairs of rows per column [row/2][dv]
//     dK += dSᵀ·Q       A = dSᵀ rows in bf16, B = Q pairs of rows [row/2][d]; ·scale
//                       when dK is written (Q is used unscaled, exactly)
//   pass 2, item = stacked q block as in the forward, per K/V tile:
//     Sᵀ, dPᵀ           as above (K rows of d_pad elements)
//     dQ += dS·K        A = dS rounded to bf16 as pairs of keys [key/2][row], B = K as
//                       pairs of keys per column in panels, inf/NaN of K zeroed (a
//                       masked key has dS = 0 exactly, and 0·NaN would reach the row's
//                       dq; a row that sees such a key already has dS = NaN); ·scale at
//                       the end
// Every output element is written by one item in a fixed order: results are bitwise
// identical for any thread count, as in the f32 backward.
// Tolerance class: inputs (q, k, v, dO) are exact in bf16, products exact in f32, sums
// in f32; the roundings beyond the f32 kernels are P and dS to bf16 (relative 2^-9
// each), which naive bf16 attention applies too (its P, dP, dS are bf16 tensors): the
// error vs the fp64 reference stays within 2x naive bf16 + eps (cross-backend suite,
// cpu_avx512bf16 / cpu_amx backward entries; tests/cpu/cpu_bf16_kernel_test.cpp).
// Measured 2026-11-24, dev machine (AMD EPYC Zen 4, 2 shared vCPUs), B=1 H=8 S=2048
// D=128, 2 threads, alternating with the f32 backward in one run: 210-221 GFLOP/s wall,
// 1.96x the f32 backward non-causal, 1.92x causal (median of 4 rounds); 1.92x / 1.86x
// the bf16 backward it replaces (bf16 widened onto the FMA kernels). Details:
// backends/cpu/README.md.
// Run: build/tests/cpu/flash_cpu_bf16_kernel_test; OMP_NUM_THREADS=2
// build/tests/cpu/flash_cpu_speed 1 8 2048 128 bf16/f32 4 backward.
//
// Compiled like forward_avx512bf16.cpp (its header says why): Highway's AVX3 target
// only, avx512bf16 added to the kernel region's attributes.

// clang-format off
#undef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX2 | HWY_AVX3_DL)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/backward_avx512bf16.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "backends/cpu/backward-inl.h"
// clang-format on

// Everything the kernel region includes, first included here, outside it.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "backends/cpu/avx512bf16.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_plan.h"
#include "hwy/aligned_allocator.h"

#if HWY_TARGET == HWY_AVX3
HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",avx512bf16")
#include "backends/cpu/avx512bf16_microkernel.h"
namespace flash::cpu::HWY_NAMESPACE {
namespace {

static_assert(Tiles::kLanes == BT::kLanes, "AVX3 vectors are 16 f32 lanes");
// Pass 1 q tiles (Tiles::kRows rows) are whole 32-float groups (bf16 conversion of Pᵀ
// rows), whole pairs of rows, and whole QK column blocks; passes of pass 2 likewise.
static_assert(Tiles::kRows % (2 * BT::kLanes) == 0, "q tile rows vs bf16 conversion");
static_assert(Tiles::kRowAlign % (BT::kQkNR * BT::kLanes) == 0 && Tiles::kRowAlign % BT::kPvMR == 0,
              "rows per pass vs micro-tiles");
static_assert(Tiles::kKeys % BT::kQkMR == 0, "keys per tile vs QK micro-tile rows");

// Rows [0, n) of f32 matrix x (row stride ld, `cols` a multiple of 32) rounded to bf16
// (ties to even), consecutive elements as the pairs of each row: out[j·cols/2 + k] =
// (x[j][2k], x[j][2k+1]).
HWY_INLINE void RowsToBf16(const float* x, size_t n, size_t cols, size_t ld, uint32_t* out) {
  for (size_t j = 0; j < n; ++j)
    for (size_t c = 0; c < cols; c += 2 * BT::kLanes) {
      const __m512 lo = _mm512_loadu_ps(x + j * ld + c);
      const __m512 hi = _mm512_loadu_ps(x + j * ld + c + BT::kLanes);
      _mm512_storeu_si512(out + (j * cols + c) / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

// Pairs of consecutive rows per column: out[p·cols + c] = (x[2p][c], x[2p+1][c]) for
// p < pairs, c < cols (a multiple of 16); x: bf16 rows of `cols` elements.
HWY_INLINE void PairRowsDense(const uint16_t* x, size_t pairs, size_t cols, uint32_t* out) {
  for (size_t pr = 0; pr < pairs; ++pr)
    for (size_t c = 0; c < cols; c += BT::kLanes)
      _mm512_storeu_si512(out + pr * cols + c,
                          PairRows(x + 2 * pr * cols + c, x + (2 * pr + 1) * cols + c));
}

// D_i and lse·log2e of row r (query position i of head h, i < 0: padding: P = 0).
HWY_INLINE void RowStats(const CallArgs& a, int64_t b, int64_t h, int64_t i, float* di,
                         float* lse2) {
  const flash_problem& p = *a.p;
  if (i < 0) {
    *di = 0.0f;
    *lse2 = std::numeric_limits<float>::infinity();
    return;
  }
  *di = a.delta[(b * p.heads_q + h) * p.seqlen_q + i];
  const float lse = a.lse[(b * p.heads_q + h) * p.seqlen_q + i];
  // A row that saw no key (lse = -inf) has P = 0: lse2 = +inf gives exactly that.
  *lse2 = lse == -std::numeric_limits<float>::infinity() ? std::numeric_limits<float>::infinity()
                                                         : lse * kLog2e;
}

// bf16 scratch of one thread, grown and reused (as Workspace).
PackBuffers& ThreadPacks() {
  static thread_local PackBuffers packs;
  return packs;
}

// Pass 1: dK and dV of up to Plan::kv_per_item consecutive K/V tiles, summed over the
// group's heads and every q tile in a fixed order (as BackwardKvItemImpl).
void BackwardKvItemBf16(const Plan& plan, int64_t item) {
  const CallArgs& a = plan.a;
  const flash_problem& p = *a.p;
  int64_t b, hkv, kv_first;
  plan.decode_kv_item(item, b, hkv, kv_first);
  const size_t R = Tiles::kRows, K = Tiles::kKeys, R2 = R / 2;
  const size_t n_tiles =
      static_cast<size_t>(std::min<int64_t>(plan.kv_per_item, plan.kv_blocks - kv_first));
  const size_t D = static_cast<size_t>(p.head_dim), Dv = static_cast<size_t>(p.head_dim_v);
  const size_t d2 = (D + 1) / 2, dv2 = (Dv + 1) / 2;
  const size_t d_pad = RoundUpTo(D, BT::kLanes), dv_pad = RoundUpTo(Dv, BT::kLanes);
  const size_t w_pad = std::max(d_pad, dv_pad);

  Workspace& ws = Workspace::ForThisThread();
  ws.reset(2 * Workspace::RoundUp(K * R) + Workspace::RoundUp(n_tiles * K * d_pad) +
           Workspace::RoundUp(n_tiles * K * dv_pad) + 4 * Workspace::RoundUp(R));
  float* st = ws.take(K * R);
  float* dpt = ws.take(K * R);
  float* dk_acc = ws.take(n_tiles * K * d_pad);
  float* dv_acc = ws.take(n_tiles * K * dv_pad);
  float* di = ws.take(R);
  float* lse2 = ws.take(R);
  float* lo_rel = ws.take(R);
  float* hi_rel = ws.take(R);
  const size_t sizes[] = {n_tiles * K * d2, n_tiles * K * dv2, d2 * R, dv2 * R,
                          R2 * d_pad,       R2 * dv_pad,       K * R2, K * R2,
                          R * w_pad / 2};
  size_t words = 0;
  for (size_t n : sizes) words += Workspace::RoundUp(n);
  uint32_t* next = ThreadPacks().Reset(words);
  auto take = [&](size_t n) {
    uint32_t* at = next;
    next += Workspace::RoundUp(n);
    return at;
  };
  uint32_t* kpack = take(sizes[0]);                                // K rows per tile (A of Sᵀ)
  uint32_t* vpack = take(sizes[1]);                                // V rows per tile (A of dPᵀ)
  uint32_t* qt = take(sizes[2]);                                   // Qᵀ pairs (B of Sᵀ)
  uint32_t* dot = take(sizes[3]);                                  // dOᵀ pairs (B of dPᵀ)
  uint32_t* qr = take(sizes[4]);                                   // Q pairs of rows (B of dK)
  uint32_t* dor = take(sizes[5]);                                  // dO pairs of rows (B of dV)
  uint32_t* p16 = take(sizes[6]);                                  // Pᵀ rows in bf16 (A of dV)
  uint32_t* ds16 = take(sizes[7]);                                 // dSᵀ rows in bf16 (A of dK)
  uint16_t* rows16 = reinterpret_cast<uint16_t*>(take(sizes[8]));  // R bf16 rows of Q or dO

  const int64_t j_item = kv_first * static_cast<int64_t>(K);
  const int64_t j_item_last =
      std::min<int64_t>(j_item + static_cast<int64_t>(n_tiles * K), p.seqlen_kv) - 1;
  for (size_t s = 0; s < n_tiles; ++s) {
    const int64_t j0 = j_item + static_cast<int64_t>(s * K);
    const size_t kb = static_cast<size_t>(std::min<int64_t>(K, p.seqlen_kv - j0));
    const size_t k_rows = RoundUpTo(kb, BT::kQkMR);
    PackRowsBf16(p.dtype, a.k, p.k_stride, b, hkv, j0, kb, k_rows, D, 2 * d2,
                 reinterpret_cast<uint16_t*>(kpack + s * K * d2));
    PackRowsBf16(p.dtype, a.v, p.v_stride, b, hkv, j0, kb, k_rows, Dv, 2 * dv2,
                 reinterpret_cast<uint16_t*>(vpack + s * K * dv2));
  }
  std::fill(dk_acc, dk_acc + n_tiles * K * d_pad, 0.0f);
  std::fill(dv_acc, dv_acc + n_tiles * K * dv_pad, 0.0f);
  int64_t* row_index = ws.index(R);

  for (int64_t g = 0; g < plan.group; ++g) {
    const int64_t h = hkv * plan.group + g;
    for (int64_t i0 = 0; i0 < p.seqlen_q; i0 += static_cast<int64_t>(R)) {
      const int64_t i_last = std::min<int64_t>(i0 + static_cast<int64_t>(R), p.seqlen_q) - 1;
      if (!plan.mask.any(i0, i_last, j_item, j_item_last)) continue;
      PrefetchNextQTile(p, a, b, h, i_last + 1, R);
      const size_t valid = static_cast<size_t>(i_last - i0 + 1);
      for (size_t r = 0; r < R; ++r) {
        row_index[r] = r < valid ? i0 + static_cast<int64_t>(r) : -1;
        RowStats(a, b, h, row_index[r], di + r, lse2 + r);
      }
      PackRowsBf16(p.dtype, a.q, p.q_stride, b, h, i0, valid, R, D, d_pad, rows16);
      TransposeWords(reinterpret_cast<const uint32_t*>(rows16), d_pad / 2, R, d2, qt, R);
      PairRowsDense(rows16, R2, d_pad, qr);
      PackRowsBf16(p.dtype, a.dout, p.o_stride, b, h, i0, valid, R, Dv, dv_pad, rows16);
      TransposeWords(reinterpret_cast<const uint32_t*>(rows16), dv_pad / 2, R, dv2, dot, R);
      PairRowsDense(rows16, R2, dv_pad, dor);
      for (size_t s = 0; s < n_tiles; ++s) {
        const int64_t j0 = j_item + static_cast<int64_t>(s * K);
        const size_t kb = static_cast<size_t>(std::min<int64_t>(K, p.seqlen_kv - j0));
        const size_t k_rows = RoundUpTo(kb, BT::kQkMR);
        const int64_t j_last = j0 + static_cast<int64_t>(kb) - 1;
        if (!plan.mask.any(i0, i_last, j0, j_last)) continue;
        const bool boundary = !plan.mask.all(i0, i_last, j0, j_last);
        if (boundary) TileIntervals(plan.mask, row_index, R, j0, kb, lo_rel, hi_rel);
        RowPairsGemm(k_rows, R, d2, kpack + s * K * d2, d2, qt, R, st, R, p.scale);
        RowPairsGemm(k_rows, R, dv2, vpack + s * K * dv2, dv2, dot, R, dpt, R, 1.0f);
        BackwardScores(st, dpt, R, kb, k_rows, p.softcap, boundary, lo_rel, hi_rel, lse2, di);
        RowsToBf16(st, k_rows, R, R, p16);
        RowsToBf16(dpt, k_rows, R, R, ds16);
        RowPairsGemm(k_rows, dv_pad, R2, p16, R2, dor, dv_pad, dv_acc + s * K * dv_pad, dv_pad,
                     1.0f, /*accumulate=*/true);
        RowPairsGemm(k_rows, d_pad, R2, ds16, R2, qr, d_pad, dk_acc + s * K * d_pad, d_pad, 1.0f,
                     /*accumulate=*/true);
      }
    }
  }
  for (int64_t key = j_item; key <= j_item_last; ++key) {
    const size_t j = static_cast<size_t>(key - j_item);  // row in the stacked accumulators
    StoreFromF32(p.dtype, dk_acc + j * d_pad, D, p.scale,
                 At(a.dk, p.dtype, p.k_stride, b, key, hkv));
    StoreFromF32(p.dtype, dv_acc + j * dv_pad, Dv, 1.0f,
                 At(a.dv, p.dtype, p.v_stride, b, key, hkv));
  }
}

// Pass 2: dQ of one stacked q block (as BackwardQItemImpl).
void BackwardQItemBf16(const Plan& plan, int64_t item) {
  const CallArgs& a = plan.a;
  const flash_problem& p = *a.p;
  int64_t b, hkv, qb;
  plan.decode_q_item(item, b, hkv, qb);
  const size_t R = static_cast<size_t>(plan.item_rows), K = Tiles::kKeys;
  const size_t RP = std::min(R, Tiles::kRows);  // rows per pass over a K/V tile
  const size_t n_passes = (R + RP - 1) / RP;
  const size_t D = static_cast<size_t>(p.head_dim), Dv = static_cast<size_t>(p.head_dim_v);
  const size_t d2 = (D + 1) / 2, dv2 = (Dv + 1) / 2;
  const size_t d_pad = RoundUpTo(D, BT::kLanes);
  const size_t kb2_max = K / 2;

  Workspace& ws = Workspace::ForThisThread();
  ws.reset(2 * Workspace::RoundUp(K * RP) + Workspace::RoundUp(R * d_pad) +
           4 * Workspace::RoundUp(R));
  float* st = ws.take(K * RP);
  float* dpt = ws.take(K * RP);
  float* dq_acc = ws.take(R * d_pad);
  float* di = ws.take(R);
  float* lse2 = ws.take(R);
  float* lo_rel = ws.take(R);
  float* hi_rel = ws.take(R);
  const size_t sizes[] = {d2 * R,
                          dv2 * R,
                          K * d_pad / 2,
                          K * dv2,
                          kb2_max * d_pad,
                          kb2_max * RP,
                          kBf16Lanes * std::max(d2, dv2)};
  size_t words = 0;
  for (size_t n : sizes) words += Workspace::RoundUp(n);
  uint32_t* next = ThreadPacks().Reset(words);
  auto take = [&](size_t n) {
    uint32_t* at = next;
    next += Workspace::RoundUp(n);
    return at;
  };
  uint32_t* qt = take(sizes[0]);      // Qᵀ pairs (B of Sᵀ)
  uint32_t* dot = take(sizes[1]);     // dOᵀ pairs (B of dPᵀ)
  uint32_t* kpack = take(sizes[2]);   // K rows of d_pad elements (A of Sᵀ, source of kpairs)
  uint32_t* vpack = take(sizes[3]);   // V rows (A of dPᵀ)
  uint32_t* kpairs = take(sizes[4]);  // K pairs of keys per column, panels (B of dQ)
  uint32_t* dsp = take(sizes[5]);     // dS pairs of keys (A of dQ)
  uint16_t* row16 = reinterpret_cast<uint16_t*>(take(sizes[6]));
  const size_t d_words = d_pad / 2;

  int64_t* row_index = ws.index(R + 2 * n_passes);
  int64_t* pass_i = row_index + R;  // per pass: i_min, i_max
  StackedRows(plan, qb, row_index);
  PackStackedPairs(plan, a.q, p.q_stride, D, b, hkv, row_index, R, d2, row16, qt);
  PackStackedPairs(plan, a.dout, p.o_stride, Dv, b, hkv, row_index, R, dv2, row16, dot);
  for (size_t r = 0; r < R; ++r) {
    const int64_t h = hkv * plan.group + static_cast<int64_t>(r) / plan.rows_per_head;
    RowStats(a, b, h, row_index[r], di + r, lse2 + r);
  }
  std::fill(dq_acc, dq_acc + R * d_pad, 0.0f);
  PassRanges(row_index, R, RP, pass_i);
  const int64_t i_first = qb * plan.rows_per_head;
  const int64_t i_last = std::min(i_first + plan.rows_per_head, p.seqlen_q) - 1;
  const int64_t j_begin = plan.mask.lo(i_first), j_end = plan.mask.hi(i_last);
  for (int64_t j0 = j_begin; j0 <= j_end; j0 += static_cast<int64_t>(K)) {
    const size_t kb = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j0));
    const size_t kb2 = (kb + 1) / 2;
    const size_t k_rows = RoundUpTo(kb, BT::kQkMR);  // >= 2·kb2: pairs read zero rows
    const int64_t j_last = j0 + static_cast<int64_t>(kb) - 1;
    PackRowsBf16(p.dtype, a.k, p.k_stride, b, hkv, j0, kb, k_rows, D, d_pad,
                 reinterpret_cast<uint16_t*>(kpack));
    PackRowsBf16(p.dtype, a.v, p.v_stride, b, hkv, j0, kb, k_rows, Dv, 2 * dv2,
                 reinterpret_cast<uint16_t*>(vpack));
    PairRowsToPanels</*kZeroNonFinite=*/true>(reinterpret_cast<const uint16_t*>(kpack), d_pad, kb2,
                                              d_pad, kpairs);
    const int64_t j_next = j0 + static_cast<int64_t>(K);
    if (j_next <= j_end) {
      const size_t n_next = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j_next));
      PrefetchRows(At(a.k, p.dtype, p.k_stride, b, j_next, hkv), p.k_stride[1] * 2, n_next, D * 2);
      PrefetchRows(At(a.v, p.dtype, p.v_stride, b, j_next, hkv), p.v_stride[1] * 2, n_next, Dv * 2);
    }
    for (size_t pi = 0; pi < n_passes; ++pi) {
      const int64_t i_min = pass_i[2 * pi], i_max = pass_i[2 * pi + 1];
      if (i_min > i_max || !plan.mask.any(i_min, i_max, j0, j_last)) continue;
      const bool boundary = !plan.mask.all(i_min, i_max, j0, j_last);
      const size_t r0 = pi * RP, rows = std::min(RP, R - r0);
      if (boundary)
        TileIntervals(plan.mask, row_index + r0, rows, j0, kb, lo_rel + r0, hi_rel + r0);
      RowPairsGemm(k_rows, rows, d2, kpack, d_words, qt + r0, R, st, rows, p.scale);
      RowPairsGemm(k_rows, rows, dv2, vpack, dv2, dot + r0, R, dpt, rows, 1.0f);
      BackwardScores(st, dpt, rows, kb, k_rows, p.softcap, boundary, lo_rel + r0, hi_rel + r0,
                     lse2 + r0, di + r0);
      PackPPairs(dpt, rows, kb, dsp);
      for (size_t r = 0; r < rows; r += BT::kPvMR)
        ColPairsRows<BT::kPvMR>(dsp + r, rows, kpairs, kb2, d_pad, 0, kb2,
                                dq_acc + (r0 + r) * d_pad, nullptr);
    }
  }
  for (size_t r = 0; r < R; ++r) {
    if (row_index[r] < 0) continue;
    const int64_t h = hkv * plan.group + static_cast<int64_t>(r) / plan.rows_per_head;
    StoreFromF32(p.dtype, dq_acc + r * d_pad, D, p.scale,
                 At(a.dq, p.dtype, p.q_stride, b, row_index[r], h));
  }
}

}  // namespace
// The entry points the HWY_ONCE part hands out (external linkage, unique names).
void Avx512Bf16BackwardKvItemImpl(const Plan& plan, int64_t item) {
  BackwardKvItemBf16(plan, item);
}
void Avx512Bf16BackwardQItemImpl(const Plan& plan, int64_t item) { BackwardQItemBf16(plan, item); }
}  // namespace flash::cpu::HWY_NAMESPACE
HWY_POP_ATTRIBUTES
#endif  // HWY_TARGET == HWY_AVX3

#if HWY_ONCE
namespace flash::cpu {

ItemFn Avx512Bf16BackwardKvItem() {
#if HWY_TARGETS & HWY_AVX3
  return &N_AVX3::Avx512Bf16BackwardKvItemImpl;
#else
  return nullptr;
#endif
}

ItemFn Avx512Bf16BackwardQItem() {
#if HWY_TARGETS & HWY_AVX3
  return &N_AVX3::Avx512Bf16BackwardQItemImpl;
#else
  return nullptr;
#endif
}

}  // namespace flash::cpu
#endif  // HWY_ONCE
