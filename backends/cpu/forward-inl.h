// CPU forward attention, one work item (per-target code; threads live in
// cpu_backend.cpp).
//
// Algorithm (FlashAttention-2 on CPU): an item is (batch, kv head, block of q rows)
// with the rows of every query head of the GQA group stacked, so each K/V tile is
// read once per group; an item runs up to 4 passes of kRows rows over each widened
// K/V tile. Qᵀ (scaled by scale·log2e) is packed once per item; then for
// each K/V tile of kKeys keys inside the item's visible key range:
//   Sᵀ = K·Qᵀ        micro-kernel; K widened/packed once per tile (V into column
//                    panels) and shared by all passes
//   mask             only on boundary tiles (whole tiles outside the mask are never
//                    visited; tiles every row fully sees skip the mask)
//   online softmax   column-wise over Sᵀ: running max m and sum l per row, P = 2^(S-m)
//   O = α·O + P·V    micro-kernel with the rescale α = 2^(m_old-m_new) folded into
//                    its load of O; boundary tiles run it over exactly the keys each
//                    row sees (BoundaryPv), so a NaN in a masked V row reaches no one.
// Normalisation by 1/l and lse = ln2·(m + log2 l) happen once, when O is written.
// Rows that see no key get o = 0, lse = -inf.
// Tolerance class: f32 accumulation throughout; error comparable to a naive f32
// attention (the cross-backend suite's 2x-naive rule).
// Measured 2026-11-21, dev machine (AMD EPYC, 2 shared vCPUs, AVX2, load ~3.5), f32,
// B=1 H=8 S=2048 D=128, flash_cpu_speed, 2 threads: 51-58 GFLOP/s wall = 64-72% of the
// FMA probe in the same window (65-72% per CPU-second); causal 45-55 = 53-63%.
// bf16 67% / 57% per CPU-second. Details: backends/cpu/README.md.
// Run: build/tests/cpu/flash_cpu_kernel_test (correctness vs a naive loop, all SIMD
// targets), build/tests/cpu/flash_cpu_speed (GFLOP/s).

#if defined(FLASH_CPU_FORWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASH_CPU_FORWARD_INL_H_
#undef FLASH_CPU_FORWARD_INL_H_
#else
#define FLASH_CPU_FORWARD_INL_H_
#endif

#include <cmath>
#include <limits>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_plan.h"
#include "backends/cpu/exp-inl.h"
#include "backends/cpu/load-inl.h"
#include "backends/cpu/microkernel-inl.h"
#include "backends/cpu/tiles-inl.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr size_t kPrefetchStep = 256;  // bytes between software prefetch hints
constexpr int64_t kPrefetchTiles = 1;  // how many K/V tiles ahead to prefetch

// Per-row key interval of one tile, relative to its first key, as floats (exact:
// values are clamped to [-1, kKeys]) so the mask is a vector compare against j.
HWY_INLINE void TileIntervals(const MaskRule& mask, const int64_t* row_index, size_t rows,
                              int64_t j0, size_t kb, float* lo_rel, float* hi_rel) {
  for (size_t r = 0; r < rows; ++r) {
    const int64_t i = row_index[r];
    if (i < 0) {  // padding row: empty interval
      lo_rel[r] = 1.0f;
      hi_rel[r] = 0.0f;
      continue;
    }
    const int64_t lo = std::max<int64_t>(mask.lo(i) - j0, -1);
    const int64_t hi = std::min<int64_t>(mask.hi(i) - j0, static_cast<int64_t>(kb));
    lo_rel[r] = static_cast<float>(std::min<int64_t>(lo, static_cast<int64_t>(kb)));
    hi_rel[r] = static_cast<float>(std::max<int64_t>(hi, -1));
  }
}

// Applies softcap (values in log2 units afterwards) and, on boundary tiles, the mask
// to Sᵀ rows [0, kb) and columns [0, rows), both in place. s_scale multiplies S before
// the softcap (for kernels whose products leave S unscaled); without softcap S is only
// masked, its scale left to OnlineSoftmax.
HWY_INLINE void CapAndMask(float* HWY_RESTRICT st, size_t rows, size_t kb, float softcap,
                           bool boundary, const float* lo_rel, const float* hi_rel,
                           float s_scale = 1.0f) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const auto inv_cap = hn::Set(d, softcap > 0 ? s_scale / softcap : 0.0f);
  // cap · tanh(s / cap) first, then · log2(e): cap · log2(e) alone overflows for
  // softcap > 2.3e38 (a valid value).
  const auto cap = hn::Set(d, softcap);
  const auto log2e = hn::Set(d, kLog2e);
  for (size_t c = 0; c < rows; c += N) {
    const auto lo = boundary ? hn::Load(d, lo_rel + c) : hn::Zero(d);
    const auto hi = boundary ? hn::Load(d, hi_rel + c) : hn::Zero(d);
    for (size_t j = 0; j < kb; ++j) {
      float* p = st + j * rows + c;
      auto s = hn::Load(d, p);
      if (softcap > 0) s = hn::Mul(hn::Mul(cap, hn::Tanh(d, hn::Mul(s, inv_cap))), log2e);
      if (boundary) {
        const auto jv = hn::Set(d, static_cast<float>(j));
        s = hn::IfThenElse(hn::And(hn::Ge(jv, lo), hn::Le(jv, hi)), s, neg_inf);
      }
      hn::Store(s, d, p);
    }
  }
}

// Online softmax over Sᵀ rows [0, kb): updates m, l, writes α and P (in place). The
// scores in log2 units are s_scale·Sᵀ (s_scale > 0, so the row max of the scaled
// scores is the scaled max; the scale is fused into the exponent's subtraction).
HWY_INLINE void OnlineSoftmax(float* HWY_RESTRICT st, size_t rows, size_t kb, float* HWY_RESTRICT m,
                              float* HWY_RESTRICT l, float* HWY_RESTRICT alpha,
                              float s_scale = 1.0f) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const auto scale = hn::Set(d, s_scale);
  for (size_t c = 0; c < rows; c += N) {
    const auto m_old = hn::Load(d, m + c);
    auto raw_max = neg_inf;
    for (size_t j = 0; j < kb; ++j) raw_max = hn::Max(raw_max, hn::Load(d, st + j * rows + c));
    const auto mx = hn::Max(m_old, hn::Mul(raw_max, scale));
    // A row that has seen only masked keys keeps m = -inf; subtract 0 instead so
    // exp2(-inf - (-inf)) never produces NaN.
    const auto m_use = hn::IfThenZeroElse(hn::Eq(mx, neg_inf), mx);
    const auto a = Exp2(d, hn::Sub(m_old, m_use));
    auto sum = hn::Zero(d);
    for (size_t j = 0; j < kb; ++j) {
      float* p = st + j * rows + c;
      const auto e = Exp2(d, hn::MulSub(hn::Load(d, p), scale, m_use));
      hn::Store(e, d, p);
      sum = hn::Add(sum, e);
    }
    hn::Store(hn::MulAdd(hn::Load(d, l + c), a, sum), d, l + c);
    hn::Store(mx, d, m + c);
    hn::Store(a, d, alpha + c);
  }
}

// O = α·O + P·V on a boundary tile, over exactly the keys each row sees (P is 0
// elsewhere, but 0·NaN from a masked V row would not be). Per block of kPvMR rows, the
// keys all of them see go through the blocked micro-kernel; the few keys at the edges
// of each row's interval (a causal diagonal adds at most kPvMR-1 per row) go row by row.
HWY_INLINE void BoundaryPv(const float* st, size_t R, size_t kb, const float* lo_rel,
                           const float* hi_rel, const float* alpha, const float* vpack, float* o,
                           size_t dv_pad) {
  constexpr size_t MR = Tiles::kPvMR;
  const int64_t kb_last = static_cast<int64_t>(kb) - 1;
  auto first = [&](size_t r) { return std::max<int64_t>(static_cast<int64_t>(lo_rel[r]), 0); };
  auto last = [&](size_t r) { return std::min<int64_t>(static_cast<int64_t>(hi_rel[r]), kb_last); };
  // Keys [j_lo, j_hi] of row r, scaled (α) on the first product touching the row.
  auto row_part = [&](size_t r, int64_t j_lo, int64_t j_hi, CMode mode) {
    const size_t count = j_hi >= j_lo ? static_cast<size_t>(j_hi - j_lo + 1) : 0;
    const size_t f = count ? static_cast<size_t>(j_lo) : 0;
    if (count == 0 && mode == CMode::kAccumulate) return;
    Gemm<1, Tiles::kPvNR>(1, dv_pad, count, StridedA{st + f * R + r, 1, R},
                          BOperand{vpack, 0, kb, f}, o + r * dv_pad, dv_pad, mode, alpha + r);
  };
  for (size_t r0 = 0; r0 < R; r0 += MR) {
    int64_t common_lo = 0, common_hi = kb_last;
    for (size_t r = r0; r < r0 + MR; ++r) {
      common_lo = std::max(common_lo, first(r));
      common_hi = std::min(common_hi, last(r));
    }
    if (common_lo > common_hi) {
      for (size_t r = r0; r < r0 + MR; ++r) row_part(r, first(r), last(r), CMode::kScaleAccumulate);
      continue;
    }
    const size_t c0 = static_cast<size_t>(common_lo);
    Gemm<MR, Tiles::kPvNR>(MR, dv_pad, static_cast<size_t>(common_hi - common_lo + 1),
                           StridedA{st + c0 * R + r0, 1, R}, BOperand{vpack, 0, kb, c0},
                           o + r0 * dv_pad, dv_pad, CMode::kScaleAccumulate, alpha + r0);
    for (size_t r = r0; r < r0 + MR; ++r) {
      row_part(r, first(r), common_lo - 1, CMode::kAccumulate);
      row_part(r, common_hi + 1, last(r), CMode::kAccumulate);
    }
  }
}

// Packs Qᵀ (d-major, `rows` columns) for the stacked rows of one item, scaled.
// row_index[r] = query position of row r or -1 for padding; head of row r is
// first_head + r / rows_per_head.
HWY_INLINE void PackQTransposed(const flash_problem& p, const void* q, int64_t b,
                                int64_t first_head, int64_t rows_per_head, const int64_t* row_index,
                                size_t rows, float scale, float* HWY_RESTRICT row_tmp,
                                float* HWY_RESTRICT qt) {
  const size_t D = static_cast<size_t>(p.head_dim);
  for (size_t r = 0; r < rows; ++r) {
    if (row_index[r] < 0) {
      for (size_t dd = 0; dd < D; ++dd) qt[dd * rows + r] = 0.0f;
      continue;
    }
    const int64_t h = first_head + static_cast<int64_t>(r) / rows_per_head;
    LoadRow(p.dtype, At(q, p.dtype, p.q_stride, b, row_index[r], h), D, scale, row_tmp);
    for (size_t dd = 0; dd < D; ++dd) qt[dd * rows + r] = row_tmp[dd];
  }
}

// Software prefetch (towards L2) of `rows` rows of `bytes` bytes each, `stride` bytes
// apart. In [b, s, h, d] layouts each K/V row of one head sits in its own 4 KiB page
// (8 heads x 128 x f32), where hardware stream prefetchers stop. One hint per 256
// bytes: a hint per 64-byte line cost ~10% of forward time in issue stalls on the dev
// machine (perf annotate), this ~5%.
HWY_INLINE void PrefetchRows(const void* base, int64_t stride, size_t rows, size_t bytes) {
  const char* p = static_cast<const char*>(base);
  for (size_t r = 0; r < rows; ++r, p += stride)
    for (size_t off = 0; off < bytes; off += kPrefetchStep) __builtin_prefetch(p + off, 0, 1);
}

// Splits an item's R rows into passes of RP rows; pass_i[2p], pass_i[2p+1] receive the
// q positions pass p spans (i_min > i_max when it holds only padding rows).
HWY_INLINE void PassRanges(const int64_t* row_index, size_t R, size_t RP, int64_t* pass_i) {
  for (size_t pi = 0; pi * RP < R; ++pi) {
    int64_t i_min = std::numeric_limits<int64_t>::max(), i_max = -1;
    for (size_t r = pi * RP; r < std::min(R, (pi + 1) * RP); ++r) {
      if (row_index[r] < 0) continue;
      i_min = std::min(i_min, row_index[r]);
      i_max = std::max(i_max, row_index[r]);
    }
    pass_i[2 * pi] = i_min;
    pass_i[2 * pi + 1] = i_max;
  }
}

// Query position of each stacked row of item (qb), -1 for padding rows.
HWY_INLINE void StackedRows(const Plan& plan, int64_t qb, int64_t* row_index) {
  const int64_t i0 = qb * plan.rows_per_head;
  for (int64_t r = 0; r < plan.item_rows; ++r) {
    const int64_t h = r / plan.rows_per_head, i = i0 + r % plan.rows_per_head;
    row_index[r] = (h < plan.group && i < plan.a.p->seqlen_q) ? i : -1;
  }
}

// Normalises a forward item's rows once and writes O (rounded once to the storage type)
// and lse; m and l hold the rows' max (log2 units) and sum. Element (r, c) of the
// item's unnormalised O is o[r·row_stride + c·col_stride]: rows of dv_pad floats
// (row_stride = dv_pad, col_stride = 1) or Oᵀ (row_stride = 1, col_stride = rows; each
// row is gathered into row_buf, head_dim_v floats, first). Shared by every forward
// kernel of the backend.
HWY_INLINE void StoreItemRows(const Plan& plan, int64_t b, int64_t hkv, const int64_t* row_index,
                              const float* o, size_t row_stride, size_t col_stride, const float* m,
                              const float* l, float* row_buf = nullptr) {
  const flash_problem& p = *plan.a.p;
  const size_t R = static_cast<size_t>(plan.item_rows), Dv = static_cast<size_t>(p.head_dim_v);
  for (size_t r = 0; r < R; ++r) {
    if (row_index[r] < 0) continue;
    const int64_t h = hkv * plan.group + static_cast<int64_t>(r) / plan.rows_per_head;
    const float inv = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
    const float* row = o + r * row_stride;
    if (col_stride != 1) {
      for (size_t c = 0; c < Dv; ++c) row_buf[c] = row[c * col_stride];
      row = row_buf;
    }
    StoreFromF32(p.dtype, row, Dv, inv, At(plan.a.o_out, p.dtype, p.o_stride, b, row_index[r], h));
    if (p.lse) {
      p.lse[(b * p.heads_q + h) * p.seqlen_q + row_index[r]] =
          l[r] == 0.0f ? -std::numeric_limits<float>::infinity() : (m[r] + std::log2(l[r])) * kLn2;
    }
  }
}

HWY_INLINE void ForwardItemImpl(const Plan& plan, int64_t item) {
  const flash_problem& p = *plan.a.p;
  int64_t b, hkv, qb;
  plan.decode_q_item(item, b, hkv, qb);
  const size_t D = static_cast<size_t>(p.head_dim), Dv = static_cast<size_t>(p.head_dim_v);
  const size_t N = Tiles::kLanes, K = Tiles::kKeys;
  const size_t R = static_cast<size_t>(plan.item_rows);
  const size_t RP = std::min(R, Tiles::kRows);  // rows per pass over a K/V tile
  const size_t dv_pad = RoundUpTo(Dv, N);

  Workspace& ws = Workspace::ForThisThread();
  ws.reset(Workspace::RoundUp(D * R) + Workspace::RoundUp(K * RP) + Workspace::RoundUp(R * dv_pad) +
           5 * Workspace::RoundUp(R) + Workspace::RoundUp(K * D) + Workspace::RoundUp(K * dv_pad) +
           Workspace::RoundUp(std::max(D, Dv)));
  float* qt = ws.take(D * R);
  float* st = ws.take(K * RP);
  float* o = ws.take(R * dv_pad);
  float* m = ws.take(R);
  float* l = ws.take(R);
  float* alpha = ws.take(R);
  float* lo_rel = ws.take(R);
  float* hi_rel = ws.take(R);
  float* kpack = ws.take(K * D);
  float* vpack = ws.take(K * dv_pad);
  float* row_tmp = ws.take(std::max(D, Dv));
  const size_t n_passes = (R + RP - 1) / RP;
  int64_t* row_index = ws.index(R + 2 * n_passes);
  int64_t* pass_i = row_index + R;  // per pass: i_min, i_max

  StackedRows(plan, qb, row_index);
  const int64_t i_first = qb * plan.rows_per_head;
  const int64_t i_last = std::min(i_first + plan.rows_per_head, p.seqlen_q) - 1;
  const float q_scale = p.softcap > 0 ? p.scale : p.scale * kLog2e;
  PackQTransposed(p, plan.a.q, b, hkv * plan.group, plan.rows_per_head, row_index, R, q_scale,
                  row_tmp, qt);
  std::fill(o, o + R * dv_pad, 0.0f);
  std::fill(m, m + R, -std::numeric_limits<float>::infinity());
  std::fill(l, l + R, 0.0f);

  // An item holds several passes of RP rows (Plan::Make); each K/V tile is widened
  // once and then used by every pass (the copy is per item, not per RP rows).
  PassRanges(row_index, R, RP, pass_i);

  const MaskRule& mask = plan.mask;
  const int64_t j_begin = mask.lo(i_first), j_end = mask.hi(i_last);  // inclusive
  for (int64_t j0 = j_begin; j0 <= j_end; j0 += static_cast<int64_t>(K)) {
    const size_t kb = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j0));
    const int64_t j_last = j0 + static_cast<int64_t>(kb) - 1;

    // K (A operand, rows = keys) widened into a dense tile, V into column panels. The
    // copy keeps the micro-kernels' streams contiguous: in place, rows 4 KiB apart
    // (8 heads x 128 x f32) alias in L1.
    const size_t k_rows = RoundUpTo(kb, Tiles::kQkMR);
    LoadTile(p.dtype, At(plan.a.k, p.dtype, p.k_stride, b, j0, hkv), p.k_stride[1], kb, k_rows, D,
             1.0f, kpack, D);
    LoadPanels(p.dtype, At(plan.a.v, p.dtype, p.v_stride, b, j0, hkv), p.v_stride[1], kb, Dv,
               Tiles::kPvNR * N, vpack);
    const StridedA ka{kpack, D, 1};
    // Fetch the next tile's K/V rows into cache while this tile computes.
    const int64_t j_next = j0 + kPrefetchTiles * static_cast<int64_t>(K);
    if (j_next <= j_end) {
      const size_t next = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j_next));
      const int64_t esize = static_cast<int64_t>(ElementSize(p.dtype));
      PrefetchRows(At(plan.a.k, p.dtype, p.k_stride, b, j_next, hkv), p.k_stride[1] * esize, next,
                   D * static_cast<size_t>(esize));
      PrefetchRows(At(plan.a.v, p.dtype, p.v_stride, b, j_next, hkv), p.v_stride[1] * esize, next,
                   Dv * static_cast<size_t>(esize));
    }

    for (size_t pi = 0; pi < n_passes; ++pi) {
      const int64_t i_min = pass_i[2 * pi], i_max = pass_i[2 * pi + 1];
      // Passes whose rows see no key of this tile never touch it.
      if (i_min > i_max || !mask.any(i_min, i_max, j0, j_last)) continue;
      const bool boundary = !mask.all(i_min, i_max, j0, j_last);
      const size_t r0 = pi * RP, rows = std::min(RP, R - r0);
      Gemm<Tiles::kQkMR, Tiles::kQkNR>(k_rows, rows, D, ka, BOperand::RowMajor(qt + r0, R), st,
                                       rows, CMode::kOverwrite);
      if (boundary) TileIntervals(mask, row_index + r0, rows, j0, kb, lo_rel + r0, hi_rel + r0);
      if (boundary || p.softcap > 0)
        CapAndMask(st, rows, kb, p.softcap, boundary, lo_rel + r0, hi_rel + r0);
      OnlineSoftmax(st, rows, kb, m + r0, l + r0, alpha + r0);
      if (!boundary) {
        Gemm<Tiles::kPvMR, Tiles::kPvNR>(rows, dv_pad, kb, StridedA{st, 1, rows},
                                         BOperand{vpack, 0, kb, 0}, o + r0 * dv_pad, dv_pad,
                                         CMode::kScaleAccumulate, alpha + r0);
      } else {
        BoundaryPv(st, rows, kb, lo_rel + r0, hi_rel + r0, alpha + r0, vpack, o + r0 * dv_pad,
                   dv_pad);
      }
    }
  }

  StoreItemRows(plan, b, hkv, row_index, o, dv_pad, 1, m, l);
}

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASH_CPU_FORWARD_INL_H_
