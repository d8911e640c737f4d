// bf16 forward attention on AMX (tdpbf16ps: a 16 x 16 f32 tile += 16 x 32 bf16 times
// 32 x 16 bf16), one work item; the amx target of the cpu backend.
//
// Algorithm: the forward of forward-inl.h (same Plan, items, passes, mask helpers) with
// both products on tiles, in the transposed orientation of the other CPU kernels (keys
// and head_dim columns are tile rows, query rows are tile columns), so the softmax
// stays column-wise on Sᵀ and P needs no transposition:
//   Sᵀ = K·Qᵀ     A = K rows as bf16 (pairs along head_dim are the words of a row),
//                 B = Qᵀ as bf16 pairs along head_dim ([d/2][row], packed once per item),
//                 C = Sᵀ tiles stored to the f32 score tile; scale·log2e is applied by
//                 the softmax, so the inputs are used exactly.
//   softmax       f32 AVX-512 (CapAndMask of forward-inl.h, OnlineSoftmaxPairs of
//                 avx512bf16_softmax.h); P written only rounded to bf16 (ties to even)
//                 as pairs of keys ([key/2][row]): the B operand of P·V as it stands.
//                 l sums the unrounded P.
//   Oᵀ += Vᵀ·Pᵀ   A = Vᵀ as pairs of keys per head_dim_v column ([c][key/2]; V is
//                 repacked into it once per K/V tile and shared by the passes), B = P
//                 pairs, C = Oᵀ (f32 [c][row], in memory between tiles): the rescale
//                 α = 2^(m_old - m_new) multiplies Oᵀ's columns in AVX-512 before the
//                 C tiles are loaded (skipped when every α of the pass is 1).
//   Tiles are 16 x 64 bytes, configured once per item on the calling thread (tile state
//   is per thread) and released at its end; 2 x 2 C tiles per block, so each A and B
//   tile load feeds two products. Operands are zero-padded to whole tiles (keys to 16,
//   head_dim to 32, pairs of keys to 16).
//   Masks: a masked key has P = 0 exactly, so on a boundary tile the blocked P·V adds
//   exact zeros — unless that key's V holds inf/NaN (0·NaN is NaN). Tiles whose V has a
//   non-finite value (checked when V is packed) run P·V on boundary tiles over exactly
//   the keys each row sees, in AVX-512 with a per-key lane mask of the rows that see it.
// Tolerance class: as the avx512bf16 forward (forward_avx512bf16.cpp): inputs exact in
// bf16, products exact in f32, f32 sums; P rounded to bf16 (relative 2^-9 per weight,
// the rounding naive bf16 attention applies to P too): within 2x naive bf16 + eps
// (cross-backend suite cpu_amx; tests/cpu/cpu_bf16_kernel_test.cpp). tdpbf16ps treats
// denormals as zero and flushes denormal sums: P < 2^-126 counts as 0.
// Measured: not yet on a machine with AMX (the dev machine has none); the device host
// run is tests/cpu/device_cpu.sh. Details: backends/cpu/README.md.
// Run: build/tests/cpu/flash_cpu_bf16_kernel_test (real tiles; skips without AMX),
// build/tests/cpu/flash_cpu_amx_emulated_test (this file compiled with
// FLASH_AMX_EMULATE: tiles emulated in scalar C++, runs wherever AVX512-BF16 does);
// OMP_NUM_THREADS=16 build/tests/cpu/flash_cpu_speed 1 8 2048 128 bf16@amx/f32 8.
//
// Compiled like forward_avx512bf16.cpp (its header says why): Highway's AVX3 target
// only, avx512bf16 added to the kernel region's attributes; the tile instructions are
// inline asm (amx_tile_ops.h) and need no target flag. The CPUID / OS / permission
// check runs in the HWY_ONCE part, compiled for the baseline.

// clang-format off
#undef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX2 | HWY_AVX3_DL)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/forward_amx.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "backends/cpu/forward-inl.h"
// clang-format on

// Everything the kernel region includes, first included here, outside it: no inline
// function shared with other files is compiled with AVX-512 attributes.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "backends/cpu/amx.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_plan.h"
#include "hwy/aligned_allocator.h"

#if HWY_TARGET == HWY_AVX3
HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",avx512bf16")
#include "backends/cpu/amx_gemm.h"
#include "backends/cpu/avx512bf16_pack.h"
#include "backends/cpu/avx512bf16_softmax.h"
namespace flash::cpu::HWY_NAMESPACE {
namespace {

// The Plan is the avx512 target's: pass rows are whole C tile columns, and the keys of
// a tile rounded up to whole S blocks still fit the score tile (Tiles::kKeys rows).
static_assert(Tiles::kLanes == kTileWords, "an AVX3 f32 vector is one C tile row");
static_assert(Tiles::kRowAlign % kTileWords == 0 && Tiles::kRows % kTileWords == 0,
              "rows per pass vs C tile columns");
static_assert(Tiles::kKeys % kBlockRows == 0, "a full K/V tile is whole 2 x 2 S blocks");
constexpr size_t kHeadDimStep = 2 * AT::kPairsPerStep;  // head_dim elements per product step
constexpr size_t kKeyPairStep = AT::kPairsPerStep;      // key pairs per P·V step

// Oᵀ columns [0, rows) times α (ot: row stride ld); nothing when every α is 1.
HWY_INLINE void RescaleColumns(float* ot, size_t ld, size_t dv_pad, const float* alpha,
                               size_t rows) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __mmask16 moved = 0;
  for (size_t r = 0; r < rows; r += kTileWords)
    moved |= _mm512_cmp_ps_mask(_mm512_loadu_ps(alpha + r), one, _CMP_NEQ_UQ);
  if (moved == 0) return;
  for (size_t r = 0; r < rows; r += kTileWords) {
    const __m512 a = _mm512_loadu_ps(alpha + r);
    for (size_t c = 0; c < dv_pad; ++c)
      _mm512_storeu_ps(ot + c * ld + r, _mm512_mul_ps(_mm512_loadu_ps(ot + c * ld + r), a));
  }
}

// Oᵀ += Vᵀ·Pᵀ over exactly the keys each row sees (boundary tiles whose V holds inf or
// NaN): lanes are query rows, and key j's products reach only the lanes of rows that
// see it. ppack: P as bf16 pairs of keys ([key/2][row], `rows` columns), the P the tile
// product would use; ot: row stride ld.
HWY_INLINE void ExactKeysPv(const uint32_t* ppack, size_t rows, size_t kb, const float* lo_rel,
                            const float* hi_rel, const uint16_t* vrows, size_t dv_pad, float* ot,
                            size_t ld) {
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (size_t r = 0; r < rows; r += kTileWords) {
    const __m512 lo = _mm512_loadu_ps(lo_rel + r), hi = _mm512_loadu_ps(hi_rel + r);
    for (size_t j = 0; j < kb; ++j) {
      const __m512 jv = _mm512_set1_ps(static_cast<float>(j));
      const __mmask16 sees =
          _mm512_cmp_ps_mask(jv, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(jv, hi, _CMP_LE_OQ);
      if (sees == 0) continue;
      // Key j is the low (even j) or high half of pair j / 2: as f32, that half in the
      // upper 16 bits.
      const __m512i pair = _mm512_loadu_si512(ppack + j / 2 * rows + r);
      const __m512 pj = _mm512_castsi512_ps(j % 2 == 0 ? _mm512_slli_epi32(pair, 16)
                                                       : _mm512_and_si512(pair, high_half));
      const uint16_t* vj = vrows + j * dv_pad;
      for (size_t c = 0; c < dv_pad; ++c) {
        float* o = ot + c * ld + r;
        const __m512 v = _mm512_set1_ps(Bf16ToF32(vj[c]));
        _mm512_storeu_ps(o, _mm512_mask3_fmadd_ps(pj, v, _mm512_loadu_ps(o), sees));
      }
    }
  }
}

void ForwardItemAmx(const Plan& plan, int64_t item) {
  const flash_problem& p = *plan.a.p;
  int64_t b, hkv, qb;
  plan.decode_q_item(item, b, hkv, qb);
  const size_t D = static_cast<size_t>(p.head_dim), Dv = static_cast<size_t>(p.head_dim_v);
  const size_t d2p = RoundUpTo(D, kHeadDimStep) / 2;  // head_dim pairs, whole product steps
  const size_t K = Tiles::kKeys;
  const size_t R = static_cast<size_t>(plan.item_rows);
  const size_t RP = std::min(R, Tiles::kRows);  // rows per pass over a K/V tile
  const size_t dv_pad = RoundUpTo(Dv, kTileWords);
  const size_t kb2p_max = RoundUpTo(K / 2, kKeyPairStep);

  Workspace& ws = Workspace::ForThisThread();
  ws.reset(Workspace::RoundUp(K * RP) + Workspace::RoundUp(R * dv_pad) + 5 * Workspace::RoundUp(R) +
           Workspace::RoundUp(Dv));
  float* st = ws.take(K * RP);
  float* ot = ws.take(R * dv_pad);  // Oᵀ: [c][row], row stride R
  float* m = ws.take(R);
  float* l = ws.take(R);
  float* alpha = ws.take(R);
  float* lo_rel = ws.take(R);
  float* hi_rel = ws.take(R);
  float* row_buf = ws.take(Dv);
  static thread_local PackBuffers packs;
  const size_t pack_words = Workspace::RoundUp(d2p * R) + Workspace::RoundUp(K * d2p) +
                            Workspace::RoundUp(dv_pad * kb2p_max) +
                            Workspace::RoundUp(kb2p_max * RP) +
                            Workspace::RoundUp(kb2p_max * dv_pad) +
                            Workspace::RoundUp(kBf16Lanes * d2p);  // 16 bf16 rows of Q
  uint32_t* qpack = packs.Reset(pack_words);
#if defined(FLASH_AMX_EMULATE)
  // Test build: every scratch word starts as NaN, so a product that reads a word this
  // item did not write (padding left unset, a stale tile) fails the oracle comparison.
  std::memset(qpack, 0xff, pack_words * sizeof(uint32_t));
  std::memset(st, 0xff, K * RP * sizeof(float));
#endif
  uint32_t* kpack = qpack + Workspace::RoundUp(d2p * R);
  uint32_t* vt = kpack + Workspace::RoundUp(K * d2p);
  uint32_t* ppack = vt + Workspace::RoundUp(dv_pad * kb2p_max);
  uint16_t* vrows = reinterpret_cast<uint16_t*>(ppack + Workspace::RoundUp(kb2p_max * RP));
  uint16_t* row16 = vrows + 2 * Workspace::RoundUp(kb2p_max * dv_pad);
  const size_t n_passes = (R + RP - 1) / RP;
  int64_t* row_index = ws.index(R + 2 * n_passes);
  int64_t* pass_i = row_index + R;  // per pass: i_min, i_max

  StackedRows(plan, qb, row_index);
  const int64_t i_first = qb * plan.rows_per_head;
  const int64_t i_last = std::min(i_first + plan.rows_per_head, p.seqlen_q) - 1;
  PackQPairs(plan, b, hkv, row_index, R, d2p, row16, qpack);
  std::fill(ot, ot + R * dv_pad, 0.0f);
  std::fill(m, m + R, -std::numeric_limits<float>::infinity());
  std::fill(l, l + R, 0.0f);
  // Softcap works on scale·S and leaves log2 units; otherwise the softmax applies
  // scale·log2e to the raw products.
  const float softmax_scale = p.softcap > 0 ? 1.0f : p.scale * kLog2e;
  PassRanges(row_index, R, RP, pass_i);

  AmxItemTiles tiles;  // configured on this thread, released at the end of the item
  const MaskRule& mask = plan.mask;
  const int64_t j_begin = mask.lo(i_first), j_end = mask.hi(i_last);  // inclusive
  for (int64_t j0 = j_begin; j0 <= j_end; j0 += static_cast<int64_t>(K)) {
    const size_t kb = static_cast<size_t>(std::min<int64_t>(K, j_end + 1 - j0));
    const size_t kb2p = RoundUpTo((kb + 1) / 2, kKeyPairStep);
    const size_t k_rows = RoundUpTo(kb, AT::kTileRows);  // S tiles: whole tiles of keys
    const int64_t j_last = j0 + static_cast<int64_t>(kb) - 1;
    PackKRows(plan, b, hkv, j0, kb, k_rows, d2p, kpack);
    const bool v_finite = PackVRows<true>(plan, b, hkv, j0, kb, 2 * kb2p, dv_pad, vrows);
    PackPairsTransposed(vrows, dv_pad, dv_pad, kb2p, vt);
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
      TileGemm(k_rows, rows, d2p / AT::kPairsPerStep, kpack, d2p, qpack + r0, R, st, rows,
               /*accumulate=*/false);
      if (boundary) TileIntervals(mask, row_index + r0, rows, j0, kb, lo_rel + r0, hi_rel + r0);
      if (boundary || p.softcap > 0)
        CapAndMask(st, rows, kb, p.softcap, boundary, lo_rel + r0, hi_rel + r0, p.scale);
      OnlineSoftmaxPairs(st, rows, kb, m + r0, l + r0, alpha + r0, softmax_scale, ppack);
      const size_t kb2 = (kb + 1) / 2;
      std::fill(ppack + kb2 * rows, ppack + kb2p * rows, 0u);  // pairs past the tile
      float* ot_pass = ot + r0;
      RescaleColumns(ot_pass, R, dv_pad, alpha + r0, rows);
      if (boundary && !v_finite)
        ExactKeysPv(ppack, rows, kb, lo_rel + r0, hi_rel + r0, vrows, dv_pad, ot_pass, R);
      else
        TileGemm(dv_pad, rows, kb2p / AT::kPairsPerStep, vt, kb2p, ppack, rows, ot_pass, R,
                 /*accumulate=*/true);
    }
  }

  StoreItemRows(plan, b, hkv, row_index, ot, /*row_stride=*/1, /*col_stride=*/R, m, l, row_buf);
}

}  // namespace
// The entry point the HWY_ONCE part hands out (external linkage, unique name).
void AmxForwardItemImpl(const Plan& plan, int64_t item) { ForwardItemAmx(plan, item); }
}  // namespace flash::cpu::HWY_NAMESPACE
HWY_POP_ATTRIBUTES
#endif  // HWY_TARGET == HWY_AVX3

#if HWY_ONCE
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#endif

namespace flash::cpu {
namespace {

#if (HWY_TARGETS & HWY_AVX3) && !defined(FLASH_AMX_EMULATE)
constexpr unsigned kAmxBf16Bit = 22, kAmxTileBit = 24;  // CPUID.(EAX=7,ECX=0):EDX
constexpr unsigned kOsxsaveBit = 27;                    // CPUID.(EAX=1):ECX
constexpr uint64_t kXcr0Tiles = (uint64_t{1} << 17) | (uint64_t{1} << 18);  // XTILECFG, XTILEDATA
constexpr long kArchReqXcompPerm = 0x1023;  // <asm/prctl.h> ARCH_REQ_XCOMP_PERM
constexpr long kXfeatureXtiledata = 18;     // the XSAVE feature number of tile data

uint64_t Xcr0() {
  uint32_t lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

// What is missing for the AMX kernel, checked once per process: the CPU features, the
// OS saving tile state, and (Linux) this process's permission to use tile data.
std::string ProbeAmx() {
  const std::string base = Avx512Bf16Missing();
  if (!base.empty()) return base;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool amx = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << kAmxTileBit)) &&
                   (edx & (1u << kAmxBf16Bit));
  if (!amx) return "AMX-TILE and AMX-BF16 (amx_tile amx_bf16: CPUID.(EAX=7 ECX=0):EDX[24] EDX[22])";
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << kOsxsaveBit)) ||
      (Xcr0() & kXcr0Tiles) != kXcr0Tiles)
    return "OS support for AMX tile state (XCR0[17] XCR0[18])";
#if defined(__linux__)
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return std::string("Linux permission to use AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
           std::strerror(errno) + ")";
#endif
  return "";
}
#endif

}  // namespace

std::string AmxMissing() {
#if !(HWY_TARGETS & HWY_AVX3)
  return "a compiler with AVX-512 (this build has no AVX3 code)";
#elif defined(FLASH_AMX_EMULATE)
  return Avx512Bf16Missing();  // tiles emulated in scalar code; the rest is AVX512-BF16
#else
  static const std::string missing = ProbeAmx();  // thread-safe, once per process
  return missing;
#endif
}

ForwardItemFn AmxForwardItem() {
#if HWY_TARGETS & HWY_AVX3
  return &N_AVX3::AmxForwardItemImpl;
#else
  return nullptr;
#endif
}

}  // namespace flash::cpu
#endif  // HWY_ONCE
