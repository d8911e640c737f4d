// CPU backward attention: two deterministic passes, or one fused pass where it pays
// (per-target code; threads live in cpu_backend.cpp).
//
// Algorithm: P is recomputed from Q, K and the forward's lse (P = 2^(s·log2e -
// lse·log2e)); with Dᵢ = rowsum(dO∘O):
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P∘(dP − D) (∘ (1 − tanh²) under softcap),
//   dK = dSᵀ·Q·scale,  dQ = dS·K·scale.
// Pass 1 (dK, dV): item = (batch, kv head, K/V block); it walks every query head of
//   the GQA group and every q tile that sees the block, so dK/dV are summed over the
//   group inside one item, in a fixed order.
// Pass 2 (dQ): item = (batch, kv head, q block) with the group's heads stacked as in
//   the forward; it walks the K/V tiles in order and accumulates dQ.
// Every output element is written by exactly one item and each item's arithmetic
// order does not depend on the thread count, so results are bitwise identical for
// any OMP_NUM_THREADS and run to run, with no atomics and no partial buffers. The
// price is recomputing Sᵀ and dPᵀ in pass 2 (8 tile products instead of 5).
// Fused (item = batch, kv head; FusedBackward in cpu_plan.h decides): pass 1's loop
// that also adds dS·K to an f32 dQ of the whole group held by the item (<= 2 MiB), so
// 5 products; bitwise the two passes' results (same tiles, same order). It needs
// batch x kv heads items for the threads; the two passes scale to any thread count.
// FLASH_CPU_BWD_FUSED=0/1 forces either (A/B: flash_cpu_speed ... f32#1/f32#0 backward).
// Every product is the micro-kernel of microkernel-inl.h in Sᵀ orientation (keys are
// rows, query rows are vector lanes), so P, dS need no transposition.
// Tolerance class: f32 accumulation; same rule as the forward.
// Items are sized like the forward's: dK/dV items of up to 4 K/V tiles share each q
// tile load, dQ items of up to 4 row passes share each widened K/V tile.
// Measured 2026-11-21, dev machine (as in forward-inl.h), f32 B=1 H=8 S=2048 D=128,
// FLOPs counted as 2.5x forward: 2 threads 35-42 GFLOP/s wall, 70-84 per CPU-second
// (~45-50% of the FMA probe; 8 products instead of 5 account for most of the gap).
// Fused item, 2026-11-24, dev machine (Zen 4, AVX-512), 1 thread, S=1k D=128: 104
// GFLOP/s (89% of the probe; the 5 products ~92% of its time; bench/RESULTS.md).
// Run: build/tests/cpu/flash_cpu_kernel_test, build/tests/cpu/flash_cpu_determinism_test.

#if defined(FLASH_CPU_BACKWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASH_CPU_BACKWARD_INL_H_
#undef FLASH_CPU_BACKWARD_INL_H_
#else
#define FLASH_CPU_BACKWARD_INL_H_
#endif

#include <cmath>
#include <limits>

#include "backends/cpu/forward-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// On entry st = Sᵀ / s_scale (s_scale·st in natural units: kernels whose products
// cannot scale pass the softmax scale here) and dpt = dPᵀ, rows [0, k_rows); on exit
// st = Pᵀ and dpt = dSᵀ (masked entries and rows >= kb are exactly 0 in both). s_scale
// = 1 computes exactly what it did before the parameter existed.
HWY_INLINE void BackwardScores(float* HWY_RESTRICT st, float* HWY_RESTRICT dpt, size_t rows,
                               size_t kb, size_t k_rows, float softcap, bool boundary,
                               const float* lo_rel, const float* hi_rel, const float* lse2,
                               const float* di, float s_scale = 1.0f) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  // Softcap leaves s in natural units; otherwise s_scale folds into the log2e factor.
  const auto log2e = hn::Set(d, softcap > 0 ? kLog2e : kLog2e * s_scale);
  const auto inv_cap = hn::Set(d, softcap > 0 ? s_scale / softcap : 0.0f);
  const auto cap = hn::Set(d, softcap);
  const auto one = hn::Set(d, 1.0f);
  for (size_t c = 0; c < rows; c += N) {
    const auto lse_v = hn::Load(d, lse2 + c);
    const auto di_v = hn::Load(d, di + c);
    const auto lo = boundary ? hn::Load(d, lo_rel + c) : hn::Zero(d);
    const auto hi = boundary ? hn::Load(d, hi_rel + c) : hn::Zero(d);
    for (size_t j = 0; j < k_rows; ++j) {
      float* sp = st + j * rows + c;
      float* dp = dpt + j * rows + c;
      if (j >= kb) {
        hn::Store(hn::Zero(d), d, sp);
        hn::Store(hn::Zero(d), d, dp);
        continue;
      }
      auto s = hn::Load(d, sp);
      auto deriv = one;
      if (softcap > 0) {
        const auto t = hn::Tanh(d, hn::Mul(s, inv_cap));
        s = hn::Mul(cap, t);
        deriv = hn::NegMulAdd(t, t, one);
      }
      auto pv = Exp2(d, hn::MulSub(s, log2e, lse_v));
      auto ds = hn::Mul(pv, hn::Sub(hn::Load(d, dp), di_v));
      if (softcap > 0) ds = hn::Mul(ds, deriv);
      if (boundary) {
        // Selected, not multiplied by p = 0: dP of a hidden key may be NaN (a NaN in its v),
        // and 0·NaN would reach the row's dq.
        const auto jv = hn::Set(d, static_cast<float>(j));
        const auto visible = hn::And(hn::Ge(jv, lo), hn::Le(jv, hi));
        pv = hn::IfThenElseZero(visible, pv);
        ds = hn::IfThenElseZero(visible, ds);
      }
      hn::Store(pv, d, sp);
      hn::Store(ds, d, dp);
    }
  }
}

// Dᵢ and lse·log2e of query position i of head h (i < 0: a padding row, whose P is 0).
HWY_INLINE void RowStats(const CallArgs& a, int64_t b, int64_t h, int64_t i, float* di,
                         float* lse2) {
  const flash_problem& p = *a.p;
  if (i < 0) {
    *di = 0.0f;
    *lse2 = std::numeric_limits<float>::infinity();  // P = 0
    return;
  }
  *di = a.delta[(b * p.heads_q + h) * p.seqlen_q + i];
  const float lse = a.lse[(b * p.heads_q + h) * p.seqlen_q + i];
  // A row that saw no key (lse = -inf) has P = 0: lse2 = +inf gives exactly that.
  *lse2 = lse == -std::numeric_limits<float>::infinity() ? std::numeric_limits<float>::infinity()
                                                         : lse * kLog2e;
}

// dst[c·ld_dst + r] = src[r·ld_src + c] for r < rows, c < cols: 4x4 blocks through
// 128-bit registers (two rounds of interleaves), the edges element by element. The
// backward needs Q and dO both ways (Qᵀ, dOᵀ as B of Sᵀ and dPᵀ; Q, dO as B of dK and
// dV); one element at a time the transposes were ~4% of the fused item's time (dev
// machine, S = 1k, D = 128, 1 thread: rdtsc around the row loads).
HWY_INLINE void Transpose(const float* HWY_RESTRICT src, size_t ld_src, size_t rows, size_t cols,
                          float* HWY_RESTRICT dst, size_t ld_dst) {
  size_t r = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::Full128<float> d4;
  const hn::Repartition<uint64_t, decltype(d4)> d2;
  const size_t cols4 = cols / 4 * 4;
  for (; r + 4 <= rows; r += 4) {
    const float* s = src + r * ld_src;
    for (size_t c = 0; c < cols4; c += 4) {
      const auto r0 = hn::LoadU(d4, s + c), r1 = hn::LoadU(d4, s + ld_src + c);
      const auto r2 = hn::LoadU(d4, s + 2 * ld_src + c), r3 = hn::LoadU(d4, s + 3 * ld_src + c);
      // Pairs of rows per column (r0c0 r1c0 r0c1 r1c1, ...), then pairs of those.
      const auto lo01 = hn::BitCast(d2, hn::InterleaveLower(d4, r0, r1));
      const auto lo23 = hn::BitCast(d2, hn::InterleaveLower(d4, r2, r3));
      const auto hi01 = hn::BitCast(d2, hn::InterleaveUpper(d4, r0, r1));
      const auto hi23 = hn::BitCast(d2, hn::InterleaveUpper(d4, r2, r3));
      float* o = dst + c * ld_dst + r;
      hn::StoreU(hn::BitCast(d4, hn::InterleaveLower(d2, lo01, lo23)), d4, o);
      hn::StoreU(hn::BitCast(d4, hn::InterleaveUpper(d2, lo01, lo23)), d4, o + ld_dst);
      hn::StoreU(hn::BitCast(d4, hn::InterleaveLower(d2, hi01, hi23)), d4, o + 2 * ld_dst);
      hn::StoreU(hn::BitCast(d4, hn::InterleaveUpper(d2, hi01, hi23)), d4, o + 3 * ld_dst);
    }
    for (size_t c = cols4; c < cols; ++c)
      for (size_t k = 0; k < 4; ++k) dst[c * ld_dst + r + k] = s[k * ld_src + c];
  }
#endif
  for (; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) dst[c * ld_dst + r] = src[r * ld_src + c];
}

// The item's q rows: Q (scaled) in qrow and Qᵀ in qt, dO in dorow and dOᵀ in dot,
// Dᵢ and lse·log2e. Load() fills row r from q row i of head h (i < 0: a padding row
// of zeros); Transpose() then writes qt and dot for all rows at once.
struct BackwardRows {
  float *qt, *qrow, *dot, *dorow, *di, *lse2;
  size_t rows, d_pad, dv_pad;

  HWY_INLINE void Load(const CallArgs& a, int64_t b, int64_t h, int64_t i, size_t r) const {
    const flash_problem& p = *a.p;
    const size_t D = static_cast<size_t>(p.head_dim), Dv = static_cast<size_t>(p.head_dim_v);
    float* qr = qrow + r * d_pad;
    float* dr = dorow + r * dv_pad;
    RowStats(a, b, h, i, di + r, lse2 + r);
    if (i < 0) {
      std::fill(qr, qr + d_pad, 0.0f);
      std::fill(dr, dr + dv_pad, 0.0f);
      return;
    }
    LoadRow(p.dtype, At(a.q, p.dtype, p.q_stride, b, i, h), D, p.scale, qr);
    std::fill(qr + D, qr + d_pad, 0.0f);
    LoadRow(p.dtype, At(a.dout, p.dtype, p.o_stride, b, i, h), Dv, 1.0f, dr);
    std::fill(dr + Dv, dr + dv_pad, 0.0f);
  }

  // Columns [0, n) of qt and dot (row stride `rows` either way).
  HWY_INLINE void Transpose(const flash_problem& p, size_t n) const {
    HWY_NAMESPACE::Transpose(qrow, d_pad, n, static_cast<size_t>(p.head_dim), qt, rows);
    HWY_NAMESPACE::Transpose(dorow, dv_pad, n, static_cast<size_t>(p.head_dim_v), dot, rows);
  }
};

// Workspace of one backward item.
struct BackwardTiles {
  BackwardRows rows;
  float *st, *dpt, *kpack, *vpack, *acc0, *acc1, *lo_rel, *hi_rel;
};

// acc0_floats: dK accumulator (pass 1), dQ accumulator (pass 2) or both (fused);
// kv_tiles: K/V tiles held at once (pass 1 item) — each gets its own packed K, V and dV
// accumulator; k_spare: further K slots (the fused item's NaN-free copies).
HWY_INLINE BackwardTiles TakeBackwardTiles(const flash_problem& p, size_t R, size_t acc0_floats,
                                           size_t kv_tiles = 1, size_t k_spare = 0) {
  const size_t N = Tiles::kLanes, K = Tiles::kKeys;
  const size_t D = static_cast<size_t>(p.head_dim), Dv = static_cast<size_t>(p.head_dim_v);
  const size_t d_pad = RoundUpTo(D, N), dv_pad = RoundUpTo(Dv, N);
  const size_t sizes[] = {D * R,
                          R * d_pad,
                          Dv * R,
                          R * dv_pad,
                          R,
                          R,
                          K * R,
                          K * R,
                          K * d_pad * (kv_tiles + k_spare),
                          K * dv_pad * kv_tiles,
                          acc0_floats,
                          K * dv_pad * kv_tiles,
                          R,
                          R};
  size_t total = 0;
  for (size_t s : sizes) total += Workspace::RoundUp(s);
  Workspace& ws = Workspace::ForThisThread();
  ws.reset(total);
  BackwardTiles t;
  t.rows = {ws.take(D * R),
            ws.take(R * d_pad),
            ws.take(Dv * R),
            ws.take(R * dv_pad),
            ws.take(R),
            ws.take(R),
            R,
            d_pad,
            dv_pad};
  t.st = ws.take(K * R);
  t.dpt = ws.take(K * R);
  t.kpack = ws.take(K * d_pad * (kv_tiles + k_spare));
  t.vpack = ws.take(K * dv_pad * kv_tiles);
  t.acc0 = ws.take(acc0_floats);
  t.acc1 = ws.take(K * dv_pad * kv_tiles);  // dV (pass 1)
  t.lo_rel = ws.take(R);
  t.hi_rel = ws.take(R);
  return t;
}

// K and V of one tile as A operands (rows = keys, padded to k_rows) and K also as a
// B operand (row-major, d_pad columns). Read in place only for f32 with contiguous
// rows and no padding; otherwise widened into the item's slot.
struct KvOperands {
  StridedA ka, va;
  const float* kb_ptr;
  size_t ldk;
};

HWY_INLINE KvOperands LoadKv(const CallArgs& a, int64_t b, int64_t hkv, int64_t j0, size_t kb,
                             size_t k_rows, const BackwardTiles& t, size_t slot = 0) {
  const flash_problem& p = *a.p;
  const size_t D = static_cast<size_t>(p.head_dim), Dv = static_cast<size_t>(p.head_dim_v);
  const size_t d_pad = t.rows.d_pad;
  float* kpack = t.kpack + slot * Tiles::kKeys * d_pad;
  float* vpack = t.vpack + slot * Tiles::kKeys * t.rows.dv_pad;
  // In place only for f32 with rows back to back (row stride == head_dim: one head, or
  // a [b, h, s, d] layout); rows 4 KiB apart alias in L1, so other layouts are packed.
  const bool in_place = p.dtype == FLASH_F32 && k_rows == kb && p.k_stride[1] == p.head_dim &&
                        p.v_stride[1] == p.head_dim_v;
  KvOperands op;
  if (in_place && d_pad == D) {
    const float* kp = static_cast<const float*>(At(a.k, p.dtype, p.k_stride, b, j0, hkv));
    op.ka = {kp, static_cast<size_t>(p.k_stride[1]), 1};
    op.kb_ptr = kp;
    op.ldk = static_cast<size_t>(p.k_stride[1]);
  } else {
    LoadTile(p.dtype, At(a.k, p.dtype, p.k_stride, b, j0, hkv), p.k_stride[1], kb, k_rows, D, 1.0f,
             kpack, d_pad);
    op.ka = {kpack, d_pad, 1};
    op.kb_ptr = kpack;
    op.ldk = d_pad;
  }
  if (in_place) {
    op.va = {static_cast<const float*>(At(a.v, p.dtype, p.v_stride, b, j0, hkv)),
             static_cast<size_t>(p.v_stride[1]), 1};
  } else {
    LoadTile(p.dtype, At(a.v, p.dtype, p.v_stride, b, j0, hkv), p.v_stride[1], kb, k_rows, Dv, 1.0f,
             vpack, Dv);
    op.va = {vpack, Dv, 1};
  }
  return op;
}

// K as the B operand of dQ += dS·K. That product multiplies the keys a row does not see
// (dS = 0) by their k rows, and 0·NaN = NaN: a NaN or inf in k of a hidden key would
// reach the row's dq. Scores use K as it is (the rows that see such a key get NaN, as in
// the reference); a tile holding NaN/inf (real data never does) gives the dQ product a
// copy with those values zeroed, in `spare` (kb rows of d_pad floats).
struct FiniteK {
  const float* ptr;
  size_t ld;
};
HWY_INLINE FiniteK FiniteKeys(const KvOperands& kv, size_t kb, size_t D, size_t d_pad,
                              float* spare) {
  // x - x is 0 for finite x, NaN for NaN/inf, and NaN stays in a sum. Lanes of vectors
  // (the scalar sum was one dependent add per element: ~1% of the fused item's time).
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto acc = hn::Zero(d);
  float acc_tail = 0.0f;
  for (size_t j = 0; j < kb; ++j) {
    const float* row = kv.kb_ptr + j * kv.ldk;
    size_t c = 0;
    for (; c + N <= D; c += N) {
      const auto x = hn::LoadU(d, row + c);
      acc = hn::Add(acc, hn::Sub(x, x));
    }
    for (; c < D; ++c) acc_tail += row[c] - row[c];
  }
  if (hn::AllTrue(d, hn::Eq(acc, hn::Zero(d))) && acc_tail == 0.0f) return {kv.kb_ptr, kv.ldk};
  for (size_t j = 0; j < kb; ++j)
    for (size_t c = 0; c < d_pad; ++c) {
      const float x = c < D ? kv.kb_ptr[j * kv.ldk + c] : 0.0f;
      spare[j * d_pad + c] = x - x == 0.0f ? x : 0.0f;
    }
  return {spare, d_pad};
}

// Sᵀ and dPᵀ of one (K/V tile, q tile), turned into Pᵀ and dSᵀ.
// Columns [r0, r0 + rows) of the item's rows (Qᵀ, dOᵀ have row stride ld); Sᵀ and
// dPᵀ are written dense with `rows` columns.
HWY_INLINE void ScoresAndGrad(const flash_problem& p, const KvOperands& kv, size_t k_rows,
                              size_t kb, size_t r0, size_t rows, size_t ld, bool boundary,
                              const BackwardTiles& t) {
  const size_t D = static_cast<size_t>(p.head_dim), Dv = static_cast<size_t>(p.head_dim_v);
  Gemm<Tiles::kQkMR, Tiles::kQkNR>(k_rows, rows, D, kv.ka, BOperand::RowMajor(t.rows.qt + r0, ld),
                                   t.st, rows, CMode::kOverwrite);
  Gemm<Tiles::kQkMR, Tiles::kQkNR>(k_rows, rows, Dv, kv.va, BOperand::RowMajor(t.rows.dot + r0, ld),
                                   t.dpt, rows, CMode::kOverwrite);
  BackwardScores(t.st, t.dpt, rows, kb, k_rows, p.softcap, boundary, t.lo_rel + r0, t.hi_rel + r0,
                 t.rows.lse2 + r0, t.rows.di + r0);
}

// Prefetches Q and dO rows [i0, i0 + rows) of head h (the next q tile of pass 1).
HWY_INLINE void PrefetchNextQTile(const flash_problem& p, const CallArgs& a, int64_t b, int64_t h,
                                  int64_t i0, size_t rows) {
  if (i0 >= p.seqlen_q) return;
  const size_t n = static_cast<size_t>(std::min<int64_t>(rows, p.seqlen_q - i0));
  const int64_t esize = static_cast<int64_t>(ElementSize(p.dtype));
  PrefetchRows(At(a.q, p.dtype, p.q_stride, b, i0, h), p.q_stride[1] * esize, n,
               static_cast<size_t>(p.head_dim * esize));
  PrefetchRows(At(a.dout, p.dtype, p.o_stride, b, i0, h), p.o_stride[1] * esize, n,
               static_cast<size_t>(p.head_dim_v * esize));
}

// Pass 0: Dᵢ = rowsum(dO∘O) for every row of one (batch, query head), once, so the
// two passes below need not re-read O for every tile.
HWY_INLINE void BackwardDeltaItemImpl(const Plan& plan, int64_t item) {
  const CallArgs& a = plan.a;
  const flash_problem& p = *a.p;
  const int64_t b = item / p.heads_q, h = item % p.heads_q;
  const size_t Dv = static_cast<size_t>(p.head_dim_v);
  Workspace& ws = Workspace::ForThisThread();
  ws.reset(2 * Workspace::RoundUp(Dv));
  float* o_row = ws.take(Dv);
  float* do_row = ws.take(Dv);
  float* out = a.delta + (b * p.heads_q + h) * p.seqlen_q;
  for (int64_t i = 0; i < p.seqlen_q; ++i) {
    LoadRow(p.dtype, At(a.o, p.dtype, p.o_stride, b, i, h), Dv, 1.0f, o_row);
    LoadRow(p.dtype, At(a.dout, p.dtype, p.o_stride, b, i, h), Dv, 1.0f, do_row);
    float sum = 0.0f;
    for (size_t c = 0; c < Dv; ++c) sum += do_row[c] * o_row[c];
    out[i] = sum;
  }
}

// dK and dV of n_tiles consecutive K/V tiles from kv_first (already in kv[]), summed
// over the group's heads and every q tile that sees them, stored to dk / dv. Each q
// tile's Q and dO are loaded once for all n_tiles tiles; every key still accumulates
// over (head, q tile) in the same order whatever the grouping, so results do not
// depend on it. With dq_acc (the fused backward) each (q tile, K/V tile) also adds
// dS·K to the f32 dQ of its rows (head g's row i at dq_acc[(g·dq_head_rows + i)·d_pad]),
// tiles in key order as pass 2 does: the same sums, bit for bit.
HWY_INLINE void KvTilesOverQ(const Plan& plan, int64_t b, int64_t hkv, int64_t kv_first,
                             size_t n_tiles, const BackwardTiles& t, const KvOperands* kv,
                             const FiniteK* kq, float* dq_acc, size_t dq_head_rows) {
  const CallArgs& a = plan.a;
  const flash_problem& p = *a.p;
  const size_t R = Tiles::kRows, K = Tiles::kKeys;
  const size_t d_pad = t.rows.d_pad, dv_pad = t.rows.dv_pad;
  const int64_t j_item = kv_first * static_cast<int64_t>(K);
  const int64_t j_item_last =
      std::min<int64_t>(j_item + static_cast<int64_t>(n_tiles * K), p.seqlen_kv) - 1;
  std::fill(t.acc0, t.acc0 + K * d_pad * n_tiles, 0.0f);
  std::fill(t.acc1, t.acc1 + K * dv_pad * n_tiles, 0.0f);
  int64_t* row_index = Workspace::ForThisThread().index(R);

  for (int64_t g = 0; g < plan.group; ++g) {
    const int64_t h = hkv * plan.group + g;
    for (int64_t i0 = 0; i0 < p.seqlen_q; i0 += static_cast<int64_t>(R)) {
      const int64_t i_last = std::min<int64_t>(i0 + static_cast<int64_t>(R), p.seqlen_q) - 1;
      if (!plan.mask.any(i0, i_last, j_item, j_item_last)) continue;
      PrefetchNextQTile(p, a, b, h, i_last + 1, R);
      // The last q tile of a head runs on its rows rounded up to whole vectors, not on
      // R: at S = 1024 it holds 64 rows, and 32 rows of zeros were 3% of the products.
      // Padding rows add exact zeros to dK, dV (P = dS = 0, Q = dO = 0), so dropping
      // them changes no result.
      const size_t rows = RoundUpTo(static_cast<size_t>(i_last - i0 + 1), Tiles::kLanes);
      for (size_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + static_cast<int64_t>(r);
        row_index[r] = i <= i_last ? i : -1;
        t.rows.Load(a, b, h, row_index[r], r);
      }
      t.rows.Transpose(p, rows);
      for (size_t s = 0; s < n_tiles; ++s) {
        const int64_t j0 = j_item + static_cast<int64_t>(s * K);
        const size_t kb = static_cast<size_t>(std::min<int64_t>(K, p.seqlen_kv - j0));
        const size_t k_rows = RoundUpTo(kb, Tiles::kKeyAlign);
        const int64_t j_last = j0 + static_cast<int64_t>(kb) - 1;
        if (!plan.mask.any(i0, i_last, j0, j_last)) continue;
        const bool boundary = !plan.mask.all(i0, i_last, j0, j_last);
        if (boundary) TileIntervals(plan.mask, row_index, rows, j0, kb, t.lo_rel, t.hi_rel);
        ScoresAndGrad(p, kv[s], k_rows, kb, 0, rows, R, boundary, t);
        Gemm<Tiles::kPvMR, Tiles::kPvNR>(k_rows, dv_pad, rows, StridedA{t.st, rows, 1},
                                         BOperand::RowMajor(t.rows.dorow, dv_pad),
                                         t.acc1 + s * K * dv_pad, dv_pad, CMode::kAccumulate);
        Gemm<Tiles::kPvMR, Tiles::kPvNR>(k_rows, d_pad, rows, StridedA{t.dpt, rows, 1},
                                         BOperand::RowMajor(t.rows.qrow, d_pad),
                                         t.acc0 + s * K * d_pad, d_pad, CMode::kAccumulate);
        if (dq_acc != nullptr) {
          float* dq =
              dq_acc + (static_cast<size_t>(g) * dq_head_rows + static_cast<size_t>(i0)) * d_pad;
          GemmAnyRows<Tiles::kPvMR, Tiles::kPvNR>(rows, d_pad, kb, StridedA{t.dpt, 1, rows},
                                                  BOperand::RowMajor(kq[s].ptr, kq[s].ld), dq,
                                                  d_pad, CMode::kAccumulate);
        }
      }
    }
  }
  const size_t D = static_cast<size_t>(p.head_dim), Dv = static_cast<size_t>(p.head_dim_v);
  for (int64_t key = j_item; key <= j_item_last; ++key) {
    const size_t j = static_cast<size_t>(key - j_item);  // row in the stacked accumulators
    StoreFromF32(p.dtype, t.acc0 + j * d_pad, D, 1.0f, At(a.dk, p.dtype, p.k_stride, b, key, hkv));
    StoreFromF32(p.dtype, t.acc1 + j * dv_pad, Dv, 1.0f,
                 At(a.dv, p.dtype, p.v_stride, b, key, hkv));
  }
}

// Pass 1: dK and dV of up to Plan::kv_per_item consecutive K/V tiles.
HWY_INLINE void BackwardKvItemImpl(const Plan& plan, int64_t item) {
  const CallArgs& a = plan.a;
  const flash_problem& p = *a.p;
  int64_t b, hkv, kv_first;
  plan.decode_kv_item(item, b, hkv, kv_first);
  const size_t K = Tiles::kKeys;
  const size_t n_tiles =
      static_cast<size_t>(std::min<int64_t>(plan.kv_per_item, plan.kv_blocks - kv_first));
  const size_t d_pad = RoundUpTo(static_cast<size_t>(p.head_dim), Tiles::kLanes);
  BackwardTiles t = TakeBackwardTiles(p, Tiles::kRows, K * d_pad * n_tiles, n_tiles);
  KvOperands kv[Plan::kMaxPasses];
  const int64_t j_item = kv_first * static_cast<int64_t>(K);
  for (size_t s = 0; s < n_tiles; ++s) {
    const int64_t j0 = j_item + static_cast<int64_t>(s * K);
    const size_t kb = static_cast<size_t>(std::min<int64_t>(K, p.seqlen_kv - j0));
    kv[s] = LoadKv(a, b, hkv, j0, kb, RoundUpTo(kb, Tiles::kKeyAlign), t, s);
  }
  KvTilesOverQ(plan, b, hkv, kv_first, n_tiles, t, kv, nullptr, nullptr, 0);
}

// Fused backward (FusedBackward in cpu_plan.h): item = (batch, kv head). For each group
// of up to kMaxPasses K/V tiles, in key order: dK, dV as pass 1 does, and dQ += dS·K
// into an f32 accumulator of all the group's query rows (at most
// FusedBackward::kMaxDqBytes), stored once at the end. Sᵀ and dPᵀ are computed once per
// (q tile, K/V tile): 5 products where the two passes take 8. The dQ sums match pass 2
// (key tiles at multiples of kKeys, in order; tiles a row does not see add exact zeros),
// so dq, dk, dv are bitwise those of the two passes.
HWY_INLINE void BackwardFusedItemImpl(const Plan& plan, int64_t item) {
  const CallArgs& a = plan.a;
  const flash_problem& p = *a.p;
  const int64_t b = item / p.heads_kv, hkv = item % p.heads_kv;
  const size_t R = Tiles::kRows, K = Tiles::kKeys, n_max = Plan::kMaxPasses;
  const size_t D = static_cast<size_t>(p.head_dim);
  const size_t d_pad = RoundUpTo(D, Tiles::kLanes);
  const size_t head_rows = RoundUpTo(static_cast<size_t>(p.seqlen_q), R);
  const size_t dk_floats = K * d_pad * n_max;
  const size_t dq_floats = static_cast<size_t>(plan.group) * head_rows * d_pad;
  // K slots [n_max, 2·n_max): each tile's keys without NaN/inf for the dQ product.
  BackwardTiles t = TakeBackwardTiles(p, R, dk_floats + dq_floats, n_max, n_max);
  float* dq_acc = t.acc0 + dk_floats;
  std::fill(dq_acc, dq_acc + dq_floats, 0.0f);
  KvOperands kv[Plan::kMaxPasses];
  FiniteK kq[Plan::kMaxPasses];
  for (int64_t kv_first = 0; kv_first < plan.kv_blocks; kv_first += Plan::kMaxPasses) {
    const size_t n_tiles =
        static_cast<size_t>(std::min<int64_t>(Plan::kMaxPasses, plan.kv_blocks - kv_first));
    for (size_t s = 0; s < n_tiles; ++s) {
      const int64_t j0 = (kv_first + static_cast<int64_t>(s)) * static_cast<int64_t>(K);
      const size_t kb = static_cast<size_t>(std::min<int64_t>(K, p.seqlen_kv - j0));
      kv[s] = LoadKv(a, b, hkv, j0, kb, RoundUpTo(kb, Tiles::kKeyAlign), t, s);
      kq[s] = FiniteKeys(kv[s], kb, D, d_pad, t.kpack + (n_max + s) * K * d_pad);
    }
    KvTilesOverQ(plan, b, hkv, kv_first, n_tiles, t, kv, kq, dq_acc, head_rows);
  }
  for (int64_t g = 0; g < plan.group; ++g) {
    const int64_t h = hkv * plan.group + g;
    for (int64_t i = 0; i < p.seqlen_q; ++i)
      StoreFromF32(p.dtype,
                   dq_acc + (static_cast<size_t>(g) * head_rows + static_cast<size_t>(i)) * d_pad,
                   D, p.scale, At(a.dq, p.dtype, p.q_stride, b, i, h));
  }
}

// Pass 2: dQ of one stacked q block.
HWY_INLINE void BackwardQItemImpl(const Plan& plan, int64_t item) {
  const CallArgs& a = plan.a;
  const flash_problem& p = *a.p;
  int64_t b, hkv, qb;
  plan.decode_q_item(item, b, hkv, qb);
  const size_t R = static_cast<size_t>(plan.item_rows), K = Tiles::kKeys;
  const size_t RP = std::min(R, Tiles::kRows);  // rows per pass over a K/V tile
  const size_t n_passes = (R + RP - 1) / RP;
  const size_t d_pad = RoundUpTo(static_cast<size_t>(p.head_dim), Tiles::kLanes);
  // Two K slots: the tile as loaded, and a copy without NaN/inf for the dQ product.
  BackwardTiles t = TakeBackwardTiles(p, R, R * d_pad, 2);
  float* dq_acc = t.acc0;
  std::fill(dq_acc, dq_acc + R * d_pad, 0.0f);
  int64_t* row_index = Workspace::ForThisThread().index(R + 2 * n_passes);
  int64_t* pass_i = row_index + R;  // per pass: i_min, i_max
  StackedRows(plan, qb, row_index);
  for (size_t r = 0; r < R; ++r) {
    const int64_t h = hkv * plan.group + static_cast<int64_t>(r) / plan.rows_per_head;
    t.rows.Load(a, b, h, row_index[r], r);
  }
  t.rows.Transpose(p, R);
  PassRanges(row_index, R, RP, pass_i);
  const int64_t i_first = qb * plan.rows_per_head;
  const int64_t i_last = std::min(i_first + plan.rows_per_head, p.seqlen_q) - 1;
  // Key tiles start at multiples of kKeys (a window's first tile is partly masked), as
  // in pass 1 and the fused item: each dq element sums the same tiles in the same order.
  const int64_t j_end = plan.mask.hi(i_last);
  const int64_t j_begin = plan.mask.lo(i_first) / static_cast<int64_t>(K) * static_cast<int64_t>(K);
  for (int64_t j0 = j_begin; j0 <= j_end; j0 += static_cast<int64_t>(K)) {
    const size_t kb = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j0));
    const size_t k_rows = RoundUpTo(kb, Tiles::kKeyAlign);
    const int64_t j_last = j0 + static_cast<int64_t>(kb) - 1;
    const KvOperands kv = LoadKv(a, b, hkv, j0, kb, k_rows, t);
    const FiniteK kq =
        FiniteKeys(kv, kb, static_cast<size_t>(p.head_dim), d_pad, t.kpack + K * d_pad);
    const int64_t j_next = j0 + static_cast<int64_t>(K);
    if (j_next <= j_end) {
      const size_t next = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j_next));
      const int64_t esize = static_cast<int64_t>(ElementSize(p.dtype));
      PrefetchRows(At(a.k, p.dtype, p.k_stride, b, j_next, hkv), p.k_stride[1] * esize, next,
                   static_cast<size_t>(p.head_dim * esize));
      PrefetchRows(At(a.v, p.dtype, p.v_stride, b, j_next, hkv), p.v_stride[1] * esize, next,
                   static_cast<size_t>(p.head_dim_v * esize));
    }
    // Each pass of RP rows reuses the tile widened above.
    for (size_t pi = 0; pi < n_passes; ++pi) {
      const int64_t i_min = pass_i[2 * pi], i_max = pass_i[2 * pi + 1];
      if (i_min > i_max || !plan.mask.any(i_min, i_max, j0, j_last)) continue;
      const bool boundary = !plan.mask.all(i_min, i_max, j0, j_last);
      const size_t r0 = pi * RP, rows = std::min(RP, R - r0);
      if (boundary)
        TileIntervals(plan.mask, row_index + r0, rows, j0, kb, t.lo_rel + r0, t.hi_rel + r0);
      ScoresAndGrad(p, kv, k_rows, kb, r0, rows, R, boundary, t);
      Gemm<Tiles::kPvMR, Tiles::kPvNR>(rows, d_pad, kb, StridedA{t.dpt, 1, rows},
                                       BOperand::RowMajor(kq.ptr, kq.ld), dq_acc + r0 * d_pad,
                                       d_pad, CMode::kAccumulate);
    }
  }
  const size_t D = static_cast<size_t>(p.head_dim);
  for (size_t r = 0; r < R; ++r) {
    if (row_index[r] < 0) continue;
    const int64_t h = hkv * plan.group + static_cast<int64_t>(r) / plan.rows_per_head;
    StoreFromF32(p.dtype, dq_acc + r * d_pad, D, p.scale,
                 At(a.dq, p.dtype, p.q_stride, b, row_index[r], h));
  }
}

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASH_CPU_BACKWARD_INL_H_
