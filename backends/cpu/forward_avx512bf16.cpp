// bf16 forward attention on AVX512-BF16 (vdpbf16ps: 16 f32 lanes, each += 2 bf16
// products), one work item; the avx512bf16 target of the cpu backend.
//
// Algorithm: the f32 forward of forward-inl.h (same Plan, items, passes, mask, whose
// helpers it calls), with both products on vdpbf16ps:
//   Sᵀ = K·Qᵀ     Qᵀ packed once per item as bf16 pairs along head_dim ([d/2][row]),
//                 K rows copied as bf16 (a pair of head_dim elements is one 32-bit
//                 broadcast); 8 keys x 3 vectors of rows in registers; scale·log2e is
//                 applied to the f32 accumulators, so the inputs are used exactly.
//   softmax       OnlineSoftmaxPairs (avx512bf16_softmax.h): the online softmax of
//                 forward-inl.h fused with writing P, rounded to bf16 (ties to even),
//                 as pairs of keys per row ([key/2][row]), with a cheaper 2^x;
//   O = α·O + P·V V packed as pairs of keys per column, in panels of 64 columns; 6
//                 rows x 4 vectors of O in registers, α folded into the load of O. l
//                 sums the unrounded P (as the GPU kernels do).
//   Boundary tiles run P·V over exactly the keys each row sees: pairs all rows of a
//   6-row block see go blocked, the rest row by row, and a key whose pair partner the
//   row does not see is multiplied with the partner's V half zeroed, so a NaN/inf in a
//   masked V row reaches no row that does not see it.
// Tolerance class: bf16 inputs are exact in bf16 and products exact in f32, sums in
// f32; the one rounding beyond the f32 kernels is P to bf16 (relative 2^-9 per
// weight), the same rounding naive attention evaluated in bf16 applies to P, and
// smaller than its other roundings (S, the row sums and O in bf16): the error vs the
// fp64 reference stays within 2x naive bf16 + eps (cross-backend suite, cpu_avx512bf16
// entries; tests/cpu/cpu_bf16_kernel_test.cpp). vcvtneps2bf16 and vdpbf16ps treat
// denormals as zero: P < 2^-126 counts as 0 (absolute error < 1e-38).
// Measured 2026-11-24, dev machine (AMD EPYC Zen 4, 2 shared vCPUs), B=1 H=8 S=2048
// D=128, 2 threads, alternating with the f32 forward in one run: 132-212 GFLOP/s wall
// (268-324 per CPU-second) non-causal, 1.90x the f32 forward (median of 8 rounds),
// causal 1.81x; with the fused softmax (avx512bf16_softmax.h) 352-356 GFLOP/s wall in a
// quiet window, +8% non-causal / +9% causal over the build before it (separate
// processes, A B B A), 1.91x / 1.97x the f32 forward. Details: backends/cpu/README.md.
// Run: build/tests/cpu/flash_cpu_bf16_kernel_test; OMP_NUM_THREADS=2
// build/tests/cpu/flash_cpu_speed 1 8 2048 128 bf16 5 (FLASH_CPU_TARGET=avx512 for the
// f32-FMA kernels on the same input).
//
// Why not a file compiled with -mavx512bf16: inline functions and template
// instantiations this file shares with the rest of the library (std::vector, Workspace)
// would be compiled with AVX-512 too, and the linker may keep that copy for callers on
// CPUs without it. Highway's per-target pragmas limit AVX-512 to this file's own
// functions: the file is compiled for the AVX3 target only (HWY_DISABLED_TARGETS
// below), and its kernel region adds avx512bf16 to that target's attributes
// (HWY_PUSH_ATTRIBUTES: GCC and clang). The CPUID check runs in the HWY_ONCE part,
// compiled for the baseline.

// clang-format off
#undef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX2 | HWY_AVX3_DL)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/forward_avx512bf16.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "backends/cpu/forward-inl.h"
// clang-format on

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "backends/cpu/avx512bf16.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_plan.h"
#include "hwy/aligned_allocator.h"

#if HWY_TARGET == HWY_AVX3
// HWY_BEFORE_NAMESPACE() with avx512bf16 added (GCC: push_options + target pragma;
// clang: attribute push), for the functions of this region only.
HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",avx512bf16")
#include "backends/cpu/avx512bf16_microkernel.h"
#include "backends/cpu/avx512bf16_softmax.h"
namespace flash::cpu::HWY_NAMESPACE {
namespace {

static_assert(Tiles::kLanes == BT::kLanes, "AVX3 vectors are 16 f32 lanes");
// The Plan is the avx512 target's: pass rows must fill whole QK column blocks and PV
// row blocks, tiles whole QK key blocks.
static_assert(Tiles::kRowAlign % (BT::kQkNR * BT::kLanes) == 0, "rows per pass vs QK block");
static_assert(Tiles::kRowAlign % BT::kPvMR == 0, "rows per pass vs PV block");
static_assert(Tiles::kRows % Tiles::kRowAlign == 0 && Tiles::kKeys % BT::kQkMR == 0,
              "tile vs micro-tile");
// Keys [a, b] of one row (b < a: none) on a boundary tile: a key whose pair partner
// the row does not see goes alone, its partner's V half zeroed (0·NaN is NaN).
HWY_INLINE void PvRowKeys(const uint32_t* ppack_r, size_t ld_p, const uint32_t* vpack, size_t kb2,
                          size_t dv_pad, int64_t a, int64_t b, float* o_r) {
  if (a > b) return;
  if (a % 2 == 1) {  // high half of pair a/2
    ColPairsRows<1, true>(ppack_r, ld_p, vpack, kb2, dv_pad, static_cast<size_t>(a / 2), 1, o_r,
                          nullptr, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
    ++a;
  }
  if (b >= a && b % 2 == 0) {  // low half of pair b/2
    ColPairsRows<1, true>(ppack_r, ld_p, vpack, kb2, dv_pad, static_cast<size_t>(b / 2), 1, o_r,
                          nullptr, _mm512_set1_epi32(0x0000ffff));
    --b;
  }
  if (a < b)
    ColPairsRows<1>(ppack_r, ld_p, vpack, kb2, dv_pad, static_cast<size_t>(a / 2),
                    static_cast<size_t>((b - a + 1) / 2), o_r, nullptr);
}

// O = α·O + P·V on a boundary tile over exactly the keys each row sees (see the file
// comment). O is scaled first, then every product accumulates.
HWY_INLINE void BoundaryPvBf16(const uint32_t* ppack, size_t rows, size_t kb, const float* lo_rel,
                               const float* hi_rel, const float* alpha, const uint32_t* vpack,
                               size_t kb2, float* o, size_t dv_pad) {
  for (size_t r = 0; r < rows; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
    for (size_t c = 0; c < dv_pad; c += BT::kLanes)
      _mm512_storeu_ps(o + r * dv_pad + c, _mm512_mul_ps(_mm512_loadu_ps(o + r * dv_pad + c), a));
  }
  constexpr size_t MR = BT::kPvMR;
  const int64_t kb_last = static_cast<int64_t>(kb) - 1;
  auto first = [&](size_t r) { return std::max<int64_t>(static_cast<int64_t>(lo_rel[r]), 0); };
  auto last = [&](size_t r) { return std::min<int64_t>(static_cast<int64_t>(hi_rel[r]), kb_last); };
  for (size_t r0 = 0; r0 < rows; r0 += MR) {
    int64_t common_lo = 0, common_hi = kb_last;
    for (size_t r = r0; r < r0 + MR; ++r) {
      common_lo = std::max(common_lo, first(r));
      common_hi = std::min(common_hi, last(r));
    }
    // Whole pairs inside the keys every row of the block sees.
    const int64_t p_lo = (common_lo + 1) / 2, p_hi = (common_hi + 1) / 2 - 1;
    const bool blocked = common_lo <= common_hi && p_lo <= p_hi;
    if (blocked)
      ColPairsRows<MR>(ppack + r0, rows, vpack, kb2, dv_pad, static_cast<size_t>(p_lo),
                       static_cast<size_t>(p_hi - p_lo + 1), o + r0 * dv_pad, nullptr);
    for (size_t r = r0; r < r0 + MR; ++r) {
      float* o_r = o + r * dv_pad;
      if (!blocked) {
        PvRowKeys(ppack + r, rows, vpack, kb2, dv_pad, first(r), last(r), o_r);
        continue;
      }
      PvRowKeys(ppack + r, rows, vpack, kb2, dv_pad, first(r), 2 * p_lo - 1, o_r);
      PvRowKeys(ppack + r, rows, vpack, kb2, dv_pad, 2 * p_hi + 2, last(r), o_r);
    }
  }
}

void ForwardItemBf16(const Plan& plan, int64_t item) {
  const flash_problem& p = *plan.a.p;
  int64_t b, hkv, qb;
  plan.decode_q_item(item, b, hkv, qb);
  const size_t D = static_cast<size_t>(p.head_dim), Dv = static_cast<size_t>(p.head_dim_v);
  const size_t d2 = (D + 1) / 2;  // head_dim pairs (odd D: a zero pair half)
  const size_t N = BT::kLanes, K = Tiles::kKeys;
  const size_t R = static_cast<size_t>(plan.item_rows);
  const size_t RP = std::min(R, Tiles::kRows);  // rows per pass over a K/V tile
  const size_t dv_pad = RoundUpTo(Dv, N);
  const size_t kb2_max = K / 2;

  Workspace& ws = Workspace::ForThisThread();
  ws.reset(Workspace::RoundUp(K * RP) + Workspace::RoundUp(R * dv_pad) + 5 * Workspace::RoundUp(R));
  float* st = ws.take(K * RP);
  float* o = ws.take(R * dv_pad);
  float* m = ws.take(R);
  float* l = ws.take(R);
  float* alpha = ws.take(R);
  float* lo_rel = ws.take(R);
  float* hi_rel = ws.take(R);
  const size_t row_words = kBf16Lanes * d2;  // 16 bf16 rows of Q (PackQPairs)
  static thread_local PackBuffers packs;
  uint32_t* qpack =
      packs.Reset(Workspace::RoundUp(d2 * R) + Workspace::RoundUp(K * d2) +
                  Workspace::RoundUp(kb2_max * dv_pad) + Workspace::RoundUp(kb2_max * RP) +
                  Workspace::RoundUp(K * dv_pad / 2) + Workspace::RoundUp(row_words));
  uint32_t* kpack = qpack + Workspace::RoundUp(d2 * R);
  uint32_t* vpack = kpack + Workspace::RoundUp(K * d2);
  uint32_t* ppack = vpack + Workspace::RoundUp(kb2_max * dv_pad);
  uint16_t* vrows = reinterpret_cast<uint16_t*>(ppack + Workspace::RoundUp(kb2_max * RP));
  uint16_t* row16 = vrows + 2 * Workspace::RoundUp(K * dv_pad / 2);
  const size_t n_passes = (R + RP - 1) / RP;
  int64_t* row_index = ws.index(R + 2 * n_passes);
  int64_t* pass_i = row_index + R;  // per pass: i_min, i_max

  StackedRows(plan, qb, row_index);
  const int64_t i_first = qb * plan.rows_per_head;
  const int64_t i_last = std::min(i_first + plan.rows_per_head, p.seqlen_q) - 1;
  // Qᵀ as bf16 pairs along head_dim: qpack[k·R + r] = (Q[r][2k], Q[r][2k+1]).
  PackQPairs(plan, b, hkv, row_index, R, d2, row16, qpack);
  std::fill(o, o + R * dv_pad, 0.0f);
  std::fill(m, m + R, -std::numeric_limits<float>::infinity());
  std::fill(l, l + R, 0.0f);
  const float q_scale = p.softcap > 0 ? p.scale : p.scale * kLog2e;
  PassRanges(row_index, R, RP, pass_i);

  const MaskRule& mask = plan.mask;
  const int64_t j_begin = mask.lo(i_first), j_end = mask.hi(i_last);  // inclusive
  for (int64_t j0 = j_begin; j0 <= j_end; j0 += static_cast<int64_t>(K)) {
    const size_t kb = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j0));
    const size_t kb2 = (kb + 1) / 2;
    const int64_t j_last = j0 + static_cast<int64_t>(kb) - 1;

    // K rows as bf16 (zero rows up to whole QK key blocks); V rows as bf16, then
    // interleaved into pairs of keys per column, in panels of kPanel columns.
    const size_t k_rows = RoundUpTo(kb, BT::kQkMR);
    PackKRows(plan, b, hkv, j0, kb, k_rows, d2, kpack);
    PackVRows<false>(plan, b, hkv, j0, kb, 2 * kb2, dv_pad, vrows);
    PairRowsToPanels(vrows, dv_pad, kb2, dv_pad, vpack);
    const int64_t j_next = j0 + kPrefetchTiles * static_cast<int64_t>(K);
    if (j_next <= j_end) {
      const size_t next = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j_next));
      PrefetchRows(At(plan.a.k, p.dtype, p.k_stride, b, j_next, hkv), p.k_stride[1] * 2, next,
                   D * 2);
      PrefetchRows(At(plan.a.v, p.dtype, p.v_stride, b, j_next, hkv), p.v_stride[1] * 2, next,
                   Dv * 2);
    }

    for (size_t pi = 0; pi < n_passes; ++pi) {
      const int64_t i_min = pass_i[2 * pi], i_max = pass_i[2 * pi + 1];
      if (i_min > i_max || !mask.any(i_min, i_max, j0, j_last)) continue;
      const bool boundary = !mask.all(i_min, i_max, j0, j_last);
      const size_t r0 = pi * RP, rows = std::min(RP, R - r0);
      RowPairsGemm(k_rows, rows, d2, kpack, d2, qpack + r0, R, st, rows, q_scale);
      if (boundary) TileIntervals(mask, row_index + r0, rows, j0, kb, lo_rel + r0, hi_rel + r0);
      if (boundary || p.softcap > 0)
        CapAndMask(st, rows, kb, p.softcap, boundary, lo_rel + r0, hi_rel + r0);
      // P only as bf16 pairs of keys: ppack[k·rows + r] = (P[r][2k], P[r][2k+1]).
      OnlineSoftmaxPairs(st, rows, kb, m + r0, l + r0, alpha + r0, 1.0f, ppack);
      float* o_pass = o + r0 * dv_pad;
      if (!boundary) {
        for (size_t r = 0; r < rows; r += BT::kPvMR)
          ColPairsRows<BT::kPvMR>(ppack + r, rows, vpack, kb2, dv_pad, 0, kb2, o_pass + r * dv_pad,
                                  alpha + r0 + r);
      } else {
        BoundaryPvBf16(ppack, rows, kb, lo_rel + r0, hi_rel + r0, alpha + r0, vpack, kb2, o_pass,
                       dv_pad);
      }
    }
  }

  StoreItemRows(plan, b, hkv, row_index, o, dv_pad, 1, m, l);
}

}  // namespace
// The entry points the HWY_ONCE part hands out (external linkage, unique names).
void Avx512Bf16ForwardItemImpl(const Plan& plan, int64_t item) { ForwardItemBf16(plan, item); }
void Avx512Bf16Exp2Impl(const float* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + kBf16Lanes <= n; i += kBf16Lanes)
    _mm512_storeu_ps(out + i, Exp2NonPositive(_mm512_loadu_ps(in + i)));
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
  _mm512_mask_storeu_ps(out + i, tail, Exp2NonPositive(_mm512_maskz_loadu_ps(tail, in + i)));
}
}  // namespace flash::cpu::HWY_NAMESPACE
HWY_POP_ATTRIBUTES
#endif  // HWY_TARGET == HWY_AVX3

#if HWY_ONCE
#include <cpuid.h>

namespace flash::cpu {

std::string Avx512Bf16Missing() {
#if HWY_TARGETS & HWY_AVX3
  // Highway's AVX3 check covers AVX-512 F/VL/DQ/BW and the OS saving zmm/opmask state
  // (XGETBV); vdpbf16ps adds CPUID.(EAX=7,ECX=1):EAX[5].
  if (!(hwy::SupportedTargets() & HWY_AVX3))
    return "AVX-512 F/VL/DQ/BW with OS support (avx512f avx512vl avx512dq avx512bw)";
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) || !(eax & (1u << 5)))
    return "AVX512_BF16 (avx512_bf16, CPUID.(EAX=7,ECX=1):EAX[5])";
  return "";
#else
  return "a compiler with AVX-512 (this build has no AVX3 code)";
#endif
}

Exp2ArrayFn Avx512Bf16Exp2Array() {
#if HWY_TARGETS & HWY_AVX3
  return &N_AVX3::Avx512Bf16Exp2Impl;
#else
  return nullptr;
#endif
}

ForwardItemFn Avx512Bf16ForwardItem() {
#if HWY_TARGETS & HWY_AVX3
  return &N_AVX3::Avx512Bf16ForwardItemImpl;
#else
  return nullptr;
#endif
}

}  // namespace flash::cpu
#endif  // HWY_ONCE
