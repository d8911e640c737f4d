// bf16 backward attention on AVX512-BF16 (vdpbf16ps: 16 f32 lanes, each += 2 bf16
// products): the dK/dV and dQ work items of the avx512bf16 target.
//
// Algorithm: the bf16 backward items of backward_bf16_items.h (the Plan, passes, delta
// pass and BackwardScores of backward-inl.h, the seven products on bf16 pairs; the amx
// target runs the same items on tiles, backward_amx.cpp) with the vdpbf16ps
// micro-kernels of avx512bf16_microkernel.h as the product engine: RowPairs blocks of 8
// keys x 3 vectors for Sᵀ, dPᵀ, dV and dK (Sᵀ scaled when stored), and dQ += dS·K in
// rows with dS pairs of keys broadcast (ColPairs, 6 rows x 4 vectors) against K as pairs
// of keys per column in panels of 64 columns.
// Tolerance class: inputs (q, k, v, dO) are exact in bf16, products exact in f32, sums
// in f32; the roundings beyond the f32 kernels are P and dS to bf16 (relative 2^-9
// each), which naive bf16 attention applies too (its P, dP, dS are bf16 tensors): the
// error vs the fp64 reference stays within 2x naive bf16 + eps (cross-backend suite,
// cpu_avx512bf16 backward entries; tests/cpu/cpu_bf16_kernel_test.cpp).
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
#include "backends/cpu/backward_bf16_items.h"
namespace flash::cpu::HWY_NAMESPACE {
namespace {

static_assert(Tiles::kLanes == BT::kLanes, "AVX3 vectors are 16 f32 lanes");
// Pass 1 q tiles (Tiles::kRows rows) are whole QK column blocks; passes of pass 2 whole
// QK column blocks and PV row blocks (the dQ product runs kPvMR rows at a time).
static_assert(Tiles::kRows % (BT::kQkNR * BT::kLanes) == 0, "q tile rows vs QK micro-tile");
static_assert(Tiles::kRowAlign % (BT::kQkNR * BT::kLanes) == 0 && Tiles::kRowAlign % BT::kPvMR == 0,
              "rows per pass vs micro-tiles");
static_assert(Tiles::kKeys % BT::kQkMR == 0, "keys per tile vs QK micro-tile rows");

// The vdpbf16ps products of backward_bf16_items.h: unpadded pairs, keys in whole QK
// micro-tile rows; dQ += dS·K in rows (ColPairs A = dS pairs of keys, B = K pairs of
// keys per column in panels).
struct Bf16VdpEngine {
  static constexpr size_t kKeyAlign = BT::kQkMR;
  static constexpr size_t kPairAlign = 1;
  static constexpr bool kScaledGemm = true;
  static constexpr bool kDqTransposed = false;
  struct ItemScope {};

  static void Gemm(size_t M, size_t N, size_t pairs, const uint32_t* a, size_t lda,
                   const uint32_t* b, size_t ldb, float* c, size_t ldc, float scale,
                   bool accumulate) {
    RowPairsGemm(M, N, pairs, a, lda, b, ldb, c, ldc, scale, accumulate);
  }
  static size_t DqKWords(size_t kb2, size_t d_pad) { return kb2 * d_pad; }
  static void PackDqK(const uint16_t* krows, size_t ld, size_t kb2, size_t d_pad, uint32_t* out) {
    PairRowsToPanels</*kZeroNonFinite=*/true>(krows, ld, kb2, d_pad, out);
  }
  // dq_acc rows [r0, r0 + rows) (d_pad floats each) += dS·K.
  static void DqProduct(const uint32_t* dsp, size_t rows, size_t kb2, const uint32_t* kpairs,
                        size_t d_pad, float* dq_acc, size_t r0, size_t /*R*/) {
    for (size_t r = 0; r < rows; r += BT::kPvMR)
      ColPairsRows<BT::kPvMR>(dsp + r, rows, kpairs, kb2, d_pad, 0, kb2, dq_acc + (r0 + r) * d_pad,
                              nullptr);
  }
};

}  // namespace
// The entry points the HWY_ONCE part hands out (external linkage, unique names).
void Avx512Bf16BackwardKvItemImpl(const Plan& plan, int64_t item) {
  BackwardKvItemBf16<Bf16VdpEngine>(plan, item);
}
void Avx512Bf16BackwardQItemImpl(const Plan& plan, int64_t item) {
  BackwardQItemBf16<Bf16VdpEngine>(plan, item);
}
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
