// bf16 backward attention on AMX (tdpbf16ps: a 16 x 16 f32 tile += 16 x 32 bf16 times
// 32 x 16 bf16): the dK/dV and dQ work items of the amx target.
//
// Algorithm: the bf16 backward items of backward_bf16_items.h (the Plan, passes, delta
// pass and BackwardScores of backward-inl.h; the avx512bf16 target runs the same items
// on vdpbf16ps, backward_avx512bf16.cpp) with the tile GEMM of amx_gemm.h (2 x 2 C tiles
// per block, as the AMX forward) as the product engine:
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ   A = K / V rows (pairs along the head dim, padded to whole
//                            16-pair steps), B = Qᵀ / dOᵀ pairs; Sᵀ is stored unscaled
//                            and BackwardScores applies scale (folded into its log2e)
//   dV += Pᵀ·dO, dK += dSᵀ·Q A = Pᵀ / dSᵀ rows in bf16 (48 pairs of query rows: 3 steps),
//                            B = dO / Q pairs of rows; C = the dV / dK accumulators
//   dQᵀ += Kᵀ·dSᵀ            as the forward's Oᵀ += Vᵀ·Pᵀ: A = K as pairs of keys per
//                            head-dim column (PackPairsTransposed, inf/NaN zeroed), B =
//                            dS pairs of keys ([key/2][row], padded to 16 pairs), C = dQᵀ
//                            ([c][row], in memory), gathered into rows when stored
// Keys are padded to whole tiles (16), pairs to whole steps (16); padding is zero, so it
// adds exact zeros. One ldtilecfg per item, on the thread that runs it.
// Tolerance class: as the avx512bf16 backward (inputs exact in bf16, products exact in
// f32, f32 sums; P and dS rounded to bf16 as naive bf16 attention rounds them): within 2x
// naive bf16 + eps (tests/cpu/cpu_bf16_kernel_test.cpp Backward*, on emulated tiles in
// flash_cpu_amx_emulated_test; cross-backend cpu_amx backward cases on the device host).
// tdpbf16ps treats denormals as zero (P, dS < 2^-126 count as 0).
// Measured: not yet on a machine with AMX (the dev machine has none); the device host
// run is tests/cpu/device_cpu.sh (speed and table steps). Details: backends/cpu/README.md.
// Run: build/tests/cpu/flash_cpu_amx_emulated_test (emulated tiles, any AVX512-BF16 CPU),
// build/tests/cpu/flash_cpu_bf16_kernel_test (real tiles; skips without AMX);
// OMP_NUM_THREADS=16 build/tests/cpu/flash_cpu_speed 1 8 2048 128 bf16@amx/f32 4 backward.
//
// Compiled like forward_amx.cpp (its header says why): Highway's AVX3 target only,
// avx512bf16 added to the kernel region's attributes, tile instructions as inline asm.

// clang-format off
#undef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX2 | HWY_AVX3_DL)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/backward_amx.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "backends/cpu/backward-inl.h"
// clang-format on

// Everything the kernel region includes, first included here, outside it.
#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backends/cpu/amx.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_plan.h"
#include "hwy/aligned_allocator.h"

#if HWY_TARGET == HWY_AVX3
HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",avx512bf16")
#include "backends/cpu/amx_gemm.h"
#include "backends/cpu/backward_bf16_items.h"
namespace flash::cpu::HWY_NAMESPACE {
namespace {

static_assert(Tiles::kLanes == kTileWords, "an AVX3 f32 vector is one C tile row");
// Pass 2 passes are whole C tile columns (N of Sᵀ, dPᵀ and dQᵀ).
static_assert(Tiles::kRowAlign % kTileWords == 0, "rows per pass vs C tile columns");

// The tile products of backward_bf16_items.h.
struct AmxEngine {
  static constexpr size_t kKeyAlign = AT::kTileRows;
  static constexpr size_t kPairAlign = AT::kPairsPerStep;
  static constexpr bool kScaledGemm = false;
  static constexpr bool kDqTransposed = true;
  using ItemScope = AmxItemTiles;

  static void Gemm(size_t M, size_t N, size_t pairs, const uint32_t* a, size_t lda,
                   const uint32_t* b, size_t ldb, float* c, size_t ldc, float /*scale*/,
                   bool accumulate) {
    TileGemm(M, N, pairs / AT::kPairsPerStep, a, lda, b, ldb, c, ldc, accumulate);
  }
  // Kᵀ as pairs of keys per head-dim column: kt[c·kb2p + k] for c < d_pad, k < kb2p.
  static size_t DqKWords(size_t kb2p, size_t d_pad) { return d_pad * kb2p; }
  static void PackDqK(const uint16_t* krows, size_t ld, size_t kb2p, size_t d_pad, uint32_t* kt) {
    PackPairsTransposed</*kZeroNonFinite=*/true>(krows, ld, d_pad, kb2p, kt);
  }
  // dQᵀ columns [r0, r0 + rows) (row stride R) += Kᵀ·dSᵀ.
  static void DqProduct(const uint32_t* dsp, size_t rows, size_t kb2p, const uint32_t* kt,
                        size_t d_pad, float* dqt, size_t r0, size_t R) {
    TileGemm(d_pad, rows, kb2p / AT::kPairsPerStep, kt, kb2p, dsp, rows, dqt + r0, R,
             /*accumulate=*/true);
  }
};

}  // namespace
// The entry points the HWY_ONCE part hands out (external linkage, unique names).
void AmxBackwardKvItemImpl(const Plan& plan, int64_t item) {
  BackwardKvItemBf16<AmxEngine>(plan, item);
}
void AmxBackwardQItemImpl(const Plan& plan, int64_t item) {
  BackwardQItemBf16<AmxEngine>(plan, item);
}
}  // namespace flash::cpu::HWY_NAMESPACE
HWY_POP_ATTRIBUTES
#endif  // HWY_TARGET == HWY_AVX3

#if HWY_ONCE
namespace flash::cpu {

ItemFn AmxBackwardKvItem() {
#if HWY_TARGETS & HWY_AVX3
  return &N_AVX3::AmxBackwardKvItemImpl;
#else
  return nullptr;
#endif
}

ItemFn AmxBackwardQItem() {
#if HWY_TARGETS & HWY_AVX3
  return &N_AVX3::AmxBackwardQItemImpl;
#else
  return nullptr;
#endif
}

}  // namespace flash::cpu
#endif  // HWY_ONCE
