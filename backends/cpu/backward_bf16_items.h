// The bf16 backward's dK/dV and dQ work items, written once for both bf16 product
// engines: vdpbf16ps (backward_avx512bf16.cpp, Bf16VdpEngine) and AMX tiles
// (backward_amx.cpp, AmxEngine). Same Plan, items, passes, delta pass and
// BackwardScores as the f32 backward of backward-inl.h; every product takes its
// operands as bf16 pairs along its reduction dimension (one 32-bit word = two
// consecutive elements of it):
//   pass 1, item = (batch, kv head, up to 4 K/V tiles), per q tile of one head:
//     Sᵀ = K·Qᵀ     A = K rows (pairs along head_dim), B = Qᵀ pairs [d/2][row]
//     dPᵀ = V·dOᵀ   A = V rows, B = dOᵀ pairs [dv/2][row]
//     dV += Pᵀ·dO   A = Pᵀ rows rounded to bf16 (pairs of consecutive query rows),
//                   B = dO as pairs of rows per column [row/2][dv]
//     dK += dSᵀ·Q   A = dSᵀ rows in bf16, B = Q pairs of rows [row/2][d]; ·scale when dK
//                   is written (Q is used unscaled, exactly)
//   pass 2, item = stacked q block as in the forward, per K/V tile:
//     Sᵀ, dPᵀ       as above
//     dQ += dS·K    dS rounded to bf16 as pairs of keys [key/2][row] and K as pairs of
//                   keys, inf/NaN of K zeroed (a masked key has dS = 0 exactly, and
//                   0·NaN would reach the row's dq; a row that sees such a key already
//                   has dS = NaN); the engine decides the orientation (dQ rows or dQᵀ);
//                   ·scale at the end
// The engine supplies the alignment its products need and the products:
//   kKeyAlign     Sᵀ / dPᵀ / dK / dV rows (keys) are padded to a multiple of it
//   kPairAlign    reduction pairs (head_dim pairs, key pairs) padded to a multiple of it
//   kScaledGemm   Gemm applies `scale` to an overwritten C (else BackwardScores applies
//                 the softmax scale to Sᵀ)
//   ItemScope     RAII state of one item (AMX: the tile configuration of this thread)
//   Gemm(M, N, pairs, a, lda, b, ldb, c, ldc, scale, accumulate): C (+)= A·B, A rows
//                 of pairs (lda words), B pair-major (ldb words), C rows (ldc floats)
//   DqKWords, PackDqK, DqProduct, kDqTransposed: K for dQ from K rows, the dQ product
//                 of one pass, and whether the dQ accumulator is dQᵀ ([c][row]).
// Every output element is written by one item in a fixed order: results are bitwise
// identical for any thread count, as in the f32 backward.
//
// Include inside the kernel region of a file compiled for Highway's AVX3 target with
// avx512bf16 added to its attributes, after backward-inl.h and the standard headers
// (see avx512bf16_pack.h).
#pragma once

#if HWY_TARGET != HWY_AVX3
#error "backward_bf16_items.h is AVX3-only code: include it in an HWY_TARGET == HWY_AVX3 region"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/avx512bf16_pack.h"

namespace flash::cpu::HWY_NAMESPACE {
namespace {

// Rows [0, n) of f32 matrix x (row stride ld, `cols` a multiple of 32) rounded to bf16
// (ties to even), consecutive elements as the pairs of each row: out[j·cols/2 + k] =
// (x[j][2k], x[j][2k+1]).
HWY_INLINE void RowsToBf16(const float* x, size_t n, size_t cols, size_t ld, uint32_t* out) {
  for (size_t j = 0; j < n; ++j)
    for (size_t c = 0; c < cols; c += 2 * kBf16Lanes) {
      const __m512 lo = _mm512_loadu_ps(x + j * ld + c);
      const __m512 hi = _mm512_loadu_ps(x + j * ld + c + kBf16Lanes);
      _mm512_storeu_si512(out + (j * cols + c) / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

// Pairs of consecutive rows per column: out[p·cols + c] = (x[2p][c], x[2p+1][c]) for
// p < pairs, c < cols (a multiple of 16); x: bf16 rows, ld_x elements apart.
HWY_INLINE void PairRowsDense(const uint16_t* x, size_t ld_x, size_t pairs, size_t cols,
                              uint32_t* out) {
  for (size_t pr = 0; pr < pairs; ++pr)
    for (size_t c = 0; c < cols; c += kBf16Lanes)
      _mm512_storeu_si512(out + pr * cols + c,
                          PairRows(x + 2 * pr * ld_x + c, x + (2 * pr + 1) * ld_x + c));
}

// bf16 scratch of one thread, grown and reused (as Workspace); consecutive 64-byte
// aligned word arrays.
struct PackArena {
  uint32_t* next;
  uint32_t* take(size_t n) {
    uint32_t* at = next;
    next += Workspace::RoundUp(n);
    return at;
  }
  template <size_t kN>
  static PackArena Reset(const size_t (&sizes)[kN]) {
    static thread_local PackBuffers packs;
    size_t words = 0;
    for (size_t n : sizes) words += Workspace::RoundUp(n);
    uint32_t* base = packs.Reset(words);
#if defined(FLASH_AMX_EMULATE)
    // Test build: every scratch word starts as NaN, so a product that reads a word this
    // item did not write (padding left unset) fails the oracle comparison.
    std::memset(base, 0xff, words * sizeof(uint32_t));
#endif
    return {base};
  }
};

// Widths of one call's packed operands for engine E.
template <class E>
struct Bf16Dims {
  size_t D, Dv;
  size_t d2, dv2;        // pairs along head_dim / head_dim_v, padded to E::kPairAlign
  size_t d_pad, dv_pad;  // head_dim / head_dim_v columns of dK, dV, dQ (multiples of 16)
  size_t w_q, w_v;       // bf16 elements per packed Q / K row and dO / V row
  explicit Bf16Dims(const flash_problem& p)
      : D(static_cast<size_t>(p.head_dim)),
        Dv(static_cast<size_t>(p.head_dim_v)),
        d2(RoundUpTo((D + 1) / 2, E::kPairAlign)),
        dv2(RoundUpTo((Dv + 1) / 2, E::kPairAlign)),
        d_pad(RoundUpTo(D, kBf16Lanes)),
        dv_pad(RoundUpTo(Dv, kBf16Lanes)),
        w_q(std::max(d_pad, 2 * d2)),
        w_v(std::max(dv_pad, 2 * dv2)) {}
};

// Pass 1: dK and dV of up to Plan::kv_per_item consecutive K/V tiles, summed over the
// group's heads and every q tile in a fixed order (as BackwardKvItemImpl).
template <class E>
void BackwardKvItemBf16(const Plan& plan, int64_t item) {
  const CallArgs& a = plan.a;
  const flash_problem& p = *a.p;
  int64_t b, hkv, kv_first;
  plan.decode_kv_item(item, b, hkv, kv_first);
  constexpr size_t R = Tiles::kRows, K = Tiles::kKeys, R2 = R / 2;
  static_assert(R % (2 * kBf16Lanes) == 0, "q tile rows vs bf16 conversion of Pᵀ rows");
  static_assert(R2 % E::kPairAlign == 0 && K % E::kKeyAlign == 0, "tile vs engine alignment");
  const size_t n_tiles =
      static_cast<size_t>(std::min<int64_t>(plan.kv_per_item, plan.kv_blocks - kv_first));
  const Bf16Dims<E> w(p);
  const float s_scale = E::kScaledGemm ? 1.0f : p.scale;

  Workspace& ws = Workspace::ForThisThread();
  ws.reset(2 * Workspace::RoundUp(K * R) + Workspace::RoundUp(n_tiles * K * w.d_pad) +
           Workspace::RoundUp(n_tiles * K * w.dv_pad) + 4 * Workspace::RoundUp(R));
  float* st = ws.take(K * R);
  float* dpt = ws.take(K * R);
  float* dk_acc = ws.take(n_tiles * K * w.d_pad);
  float* dv_acc = ws.take(n_tiles * K * w.dv_pad);
  float* di = ws.take(R);
  float* lse2 = ws.take(R);
  float* lo_rel = ws.take(R);
  float* hi_rel = ws.take(R);
  const size_t sizes[] = {n_tiles * K * w.d2,
                          n_tiles * K * w.dv2,
                          w.d2 * R,
                          w.dv2 * R,
                          R2 * w.d_pad,
                          R2 * w.dv_pad,
                          K * R2,
                          K * R2,
                          R * std::max(w.w_q, w.w_v) / 2};
  PackArena arena = PackArena::Reset(sizes);
  uint32_t* kpack = arena.take(sizes[0]);  // K rows per tile (A of Sᵀ)
  uint32_t* vpack = arena.take(sizes[1]);  // V rows per tile (A of dPᵀ)
  uint32_t* qt = arena.take(sizes[2]);     // Qᵀ pairs (B of Sᵀ)
  uint32_t* dot = arena.take(sizes[3]);    // dOᵀ pairs (B of dPᵀ)
  uint32_t* qr = arena.take(sizes[4]);     // Q pairs of rows (B of dK)
  uint32_t* dor = arena.take(sizes[5]);    // dO pairs of rows (B of dV)
  uint32_t* p16 = arena.take(sizes[6]);    // Pᵀ rows in bf16 (A of dV)
  uint32_t* ds16 = arena.take(sizes[7]);   // dSᵀ rows in bf16 (A of dK)
  uint16_t* rows16 = reinterpret_cast<uint16_t*>(arena.take(sizes[8]));  // R rows of Q or dO

  const int64_t j_item = kv_first * static_cast<int64_t>(K);
  const int64_t j_item_last =
      std::min<int64_t>(j_item + static_cast<int64_t>(n_tiles * K), p.seqlen_kv) - 1;
  for (size_t s = 0; s < n_tiles; ++s) {
    const int64_t j0 = j_item + static_cast<int64_t>(s * K);
    const size_t kb = static_cast<size_t>(std::min<int64_t>(K, p.seqlen_kv - j0));
    const size_t k_rows = RoundUpTo(kb, E::kKeyAlign);
    PackRowsBf16(p.dtype, a.k, p.k_stride, b, hkv, j0, kb, k_rows, w.D, 2 * w.d2,
                 reinterpret_cast<uint16_t*>(kpack + s * K * w.d2));
    PackRowsBf16(p.dtype, a.v, p.v_stride, b, hkv, j0, kb, k_rows, w.Dv, 2 * w.dv2,
                 reinterpret_cast<uint16_t*>(vpack + s * K * w.dv2));
  }
  std::fill(dk_acc, dk_acc + n_tiles * K * w.d_pad, 0.0f);
  std::fill(dv_acc, dv_acc + n_tiles * K * w.dv_pad, 0.0f);
  int64_t* row_index = ws.index(R);
  [[maybe_unused]] const typename E::ItemScope scope{};

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
      PackRowsBf16(p.dtype, a.q, p.q_stride, b, h, i0, valid, R, w.D, w.w_q, rows16);
      TransposeWords(reinterpret_cast<const uint32_t*>(rows16), w.w_q / 2, R, w.d2, qt, R);
      PairRowsDense(rows16, w.w_q, R2, w.d_pad, qr);
      PackRowsBf16(p.dtype, a.dout, p.o_stride, b, h, i0, valid, R, w.Dv, w.w_v, rows16);
      TransposeWords(reinterpret_cast<const uint32_t*>(rows16), w.w_v / 2, R, w.dv2, dot, R);
      PairRowsDense(rows16, w.w_v, R2, w.dv_pad, dor);
      for (size_t s = 0; s < n_tiles; ++s) {
        const int64_t j0 = j_item + static_cast<int64_t>(s * K);
        const size_t kb = static_cast<size_t>(std::min<int64_t>(K, p.seqlen_kv - j0));
        const size_t k_rows = RoundUpTo(kb, E::kKeyAlign);
        const int64_t j_last = j0 + static_cast<int64_t>(kb) - 1;
        if (!plan.mask.any(i0, i_last, j0, j_last)) continue;
        const bool boundary = !plan.mask.all(i0, i_last, j0, j_last);
        if (boundary) TileIntervals(plan.mask, row_index, R, j0, kb, lo_rel, hi_rel);
        E::Gemm(k_rows, R, w.d2, kpack + s * K * w.d2, w.d2, qt, R, st, R, p.scale, false);
        E::Gemm(k_rows, R, w.dv2, vpack + s * K * w.dv2, w.dv2, dot, R, dpt, R, 1.0f, false);
        BackwardScores(st, dpt, R, kb, k_rows, p.softcap, boundary, lo_rel, hi_rel, lse2, di,
                       s_scale);
        RowsToBf16(st, k_rows, R, R, p16);
        RowsToBf16(dpt, k_rows, R, R, ds16);
        E::Gemm(k_rows, w.dv_pad, R2, p16, R2, dor, w.dv_pad, dv_acc + s * K * w.dv_pad, w.dv_pad,
                1.0f, /*accumulate=*/true);
        E::Gemm(k_rows, w.d_pad, R2, ds16, R2, qr, w.d_pad, dk_acc + s * K * w.d_pad, w.d_pad, 1.0f,
                /*accumulate=*/true);
      }
    }
  }
  for (int64_t key = j_item; key <= j_item_last; ++key) {
    const size_t j = static_cast<size_t>(key - j_item);  // row in the stacked accumulators
    StoreFromF32(p.dtype, dk_acc + j * w.d_pad, w.D, p.scale,
                 At(a.dk, p.dtype, p.k_stride, b, key, hkv));
    StoreFromF32(p.dtype, dv_acc + j * w.dv_pad, w.Dv, 1.0f,
                 At(a.dv, p.dtype, p.v_stride, b, key, hkv));
  }
}

// Pass 2: dQ of one stacked q block (as BackwardQItemImpl).
template <class E>
void BackwardQItemBf16(const Plan& plan, int64_t item) {
  const CallArgs& a = plan.a;
  const flash_problem& p = *a.p;
  int64_t b, hkv, qb;
  plan.decode_q_item(item, b, hkv, qb);
  const size_t R = static_cast<size_t>(plan.item_rows), K = Tiles::kKeys;
  const size_t RP = std::min(R, Tiles::kRows);  // rows per pass over a K/V tile
  const size_t n_passes = (R + RP - 1) / RP;
  const Bf16Dims<E> w(p);
  const float s_scale = E::kScaledGemm ? 1.0f : p.scale;
  const size_t kb2_max = RoundUpTo(K / 2, E::kPairAlign);
  const size_t k_rows_max = std::max(K, 2 * kb2_max);

  Workspace& ws = Workspace::ForThisThread();
  ws.reset(2 * Workspace::RoundUp(K * RP) + Workspace::RoundUp(R * w.d_pad) +
           4 * Workspace::RoundUp(R) + Workspace::RoundUp(w.d_pad));
  float* st = ws.take(K * RP);
  float* dpt = ws.take(K * RP);
  float* dq_acc = ws.take(R * w.d_pad);  // dQ rows [r][c], or dQᵀ [c][r] (E::kDqTransposed)
  float* di = ws.take(R);
  float* lse2 = ws.take(R);
  float* lo_rel = ws.take(R);
  float* hi_rel = ws.take(R);
  float* row_buf = ws.take(w.d_pad);
  const size_t sizes[] = {w.d2 * R,
                          w.dv2 * R,
                          k_rows_max * w.w_q / 2,
                          K * w.dv2,
                          E::DqKWords(kb2_max, w.d_pad),
                          kb2_max * RP,
                          kBf16Lanes * std::max(w.d2, w.dv2)};
  PackArena arena = PackArena::Reset(sizes);
  uint32_t* qt = arena.take(sizes[0]);     // Qᵀ pairs (B of Sᵀ)
  uint32_t* dot = arena.take(sizes[1]);    // dOᵀ pairs (B of dPᵀ)
  uint32_t* kpack = arena.take(sizes[2]);  // K rows of w_q elements (A of Sᵀ, source of kd)
  uint32_t* vpack = arena.take(sizes[3]);  // V rows (A of dPᵀ)
  uint32_t* kd = arena.take(sizes[4]);     // K for the dQ product (E::PackDqK)
  uint32_t* dsp = arena.take(sizes[5]);    // dS pairs of keys [key/2][row]
  uint16_t* row16 = reinterpret_cast<uint16_t*>(arena.take(sizes[6]));
  uint16_t* krows = reinterpret_cast<uint16_t*>(kpack);

  int64_t* row_index = ws.index(R + 2 * n_passes);
  int64_t* pass_i = row_index + R;  // per pass: i_min, i_max
  StackedRows(plan, qb, row_index);
  PackStackedPairs(plan, a.q, p.q_stride, w.D, b, hkv, row_index, R, w.d2, row16, qt);
  PackStackedPairs(plan, a.dout, p.o_stride, w.Dv, b, hkv, row_index, R, w.dv2, row16, dot);
  for (size_t r = 0; r < R; ++r) {
    const int64_t h = hkv * plan.group + static_cast<int64_t>(r) / plan.rows_per_head;
    RowStats(a, b, h, row_index[r], di + r, lse2 + r);
  }
  std::fill(dq_acc, dq_acc + R * w.d_pad, 0.0f);
  PassRanges(row_index, R, RP, pass_i);
  const int64_t i_first = qb * plan.rows_per_head;
  const int64_t i_last = std::min(i_first + plan.rows_per_head, p.seqlen_q) - 1;
  const int64_t j_begin = plan.mask.lo(i_first), j_end = plan.mask.hi(i_last);
  [[maybe_unused]] const typename E::ItemScope scope{};
  for (int64_t j0 = j_begin; j0 <= j_end; j0 += static_cast<int64_t>(K)) {
    const size_t kb = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j0));
    const size_t kb2 = (kb + 1) / 2, kb2a = RoundUpTo(kb2, E::kPairAlign);
    const size_t k_rows = RoundUpTo(kb, E::kKeyAlign);
    const int64_t j_last = j0 + static_cast<int64_t>(kb) - 1;
    // K rows also feed the pairs of keys of the dQ product: zero rows up to 2·kb2a.
    PackRowsBf16(p.dtype, a.k, p.k_stride, b, hkv, j0, kb, std::max(k_rows, 2 * kb2a), w.D, w.w_q,
                 krows);
    PackRowsBf16(p.dtype, a.v, p.v_stride, b, hkv, j0, kb, k_rows, w.Dv, 2 * w.dv2,
                 reinterpret_cast<uint16_t*>(vpack));
    E::PackDqK(krows, w.w_q, kb2a, w.d_pad, kd);
    const int64_t j_next = j0 + static_cast<int64_t>(K);
    if (j_next <= j_end) {
      const size_t n_next = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j_next));
      PrefetchRows(At(a.k, p.dtype, p.k_stride, b, j_next, hkv), p.k_stride[1] * 2, n_next,
                   w.D * 2);
      PrefetchRows(At(a.v, p.dtype, p.v_stride, b, j_next, hkv), p.v_stride[1] * 2, n_next,
                   w.Dv * 2);
    }
    for (size_t pi = 0; pi < n_passes; ++pi) {
      const int64_t i_min = pass_i[2 * pi], i_max = pass_i[2 * pi + 1];
      if (i_min > i_max || !plan.mask.any(i_min, i_max, j0, j_last)) continue;
      const bool boundary = !plan.mask.all(i_min, i_max, j0, j_last);
      const size_t r0 = pi * RP, rows = std::min(RP, R - r0);
      if (boundary)
        TileIntervals(plan.mask, row_index + r0, rows, j0, kb, lo_rel + r0, hi_rel + r0);
      E::Gemm(k_rows, rows, w.d2, kpack, w.w_q / 2, qt + r0, R, st, rows, p.scale, false);
      E::Gemm(k_rows, rows, w.dv2, vpack, w.dv2, dot + r0, R, dpt, rows, 1.0f, false);
      BackwardScores(st, dpt, rows, kb, k_rows, p.softcap, boundary, lo_rel + r0, hi_rel + r0,
                     lse2 + r0, di + r0, s_scale);
      PackPPairs(dpt, rows, kb, dsp);
      std::fill(dsp + kb2 * rows, dsp + kb2a * rows, 0u);  // pairs past the tile
      E::DqProduct(dsp, rows, kb2a, kd, w.d_pad, dq_acc, r0, R);
    }
  }
  for (size_t r = 0; r < R; ++r) {
    if (row_index[r] < 0) continue;
    const int64_t h = hkv * plan.group + static_cast<int64_t>(r) / plan.rows_per_head;
    const float* row = dq_acc + r * w.d_pad;
    if (E::kDqTransposed) {
      for (size_t c = 0; c < w.D; ++c) row_buf[c] = dq_acc[c * R + r];
      row = row_buf;
    }
    StoreFromF32(p.dtype, row, w.D, p.scale, At(a.dq, p.dtype, p.q_stride, b, row_index[r], h));
  }
}

}  // namespace
}  // namespace flash::cpu::HWY_NAMESPACE
