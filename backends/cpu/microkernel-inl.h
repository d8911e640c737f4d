// Register-blocked f32 GEMM micro-kernel shared by every product of the forward and
// the backward (per-target code; included through targets_forward.cpp and
// targets_backward.cpp).
//
// C[M x ncols] (=, +=, or row_scale[r]·C +=) A[M x K] · B[K x ncols], where A is read
// through two strides (A(r, k) = a[r·a_rs + k·a_ks], so Kᵀ, Pᵀ and dSᵀ need no copy)
// and B row by row (ldb), contiguous along ncols. The micro-tile keeps MR rows x NR
// vectors of C in registers for the whole K loop: per k it loads NR vectors of B,
// broadcasts MR scalars of A and issues MR·NR independent FMAs — enough independent
// chains to cover FMA latency (2 pipes x 4 cycles) on every x86 target.
// Contract: M % MR == 0 (GemmAnyRows: any M) and ncols % lanes == 0 (callers pad); K is
// any size >= 0.
// Measured (perf annotate, dev machine, AVX2 6x2, 1 thread): the inner loop is 12 FMAs
// + 2 loads + 6 broadcasts, no spills; the two forward products take ~75% of forward
// time in a run at 58-69% of FMA peak overall, i.e. the loops run at ~80-90% of peak.

#if defined(FLASH_CPU_MICROKERNEL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASH_CPU_MICROKERNEL_INL_H_
#undef FLASH_CPU_MICROKERNEL_INL_H_
#else
#define FLASH_CPU_MICROKERNEL_INL_H_
#endif

#include <algorithm>
#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

enum class CMode {
  kOverwrite,        // C = A·B
  kAccumulate,       // C += A·B
  kScaleAccumulate,  // C = row_scale[r]·C + A·B  (online-softmax rescale folded in)
};

// A(r, k) = p[r·rs + k·ks].
struct StridedA {
  const float* p;
  size_t rs, ks;
};

template <size_t MR, size_t NR>
HWY_INLINE void MicroTile(size_t K, StridedA a, const float* HWY_RESTRICT b, size_t ldb,
                          float* HWY_RESTRICT c, size_t ldc, CMode mode,
                          const float* HWY_RESTRICT row_scale) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  V acc[MR][NR];
  for (size_t r = 0; r < MR; ++r)
    for (size_t n = 0; n < NR; ++n) acc[r][n] = hn::Zero(d);
  const float* ap = a.p;
  for (size_t k = 0; k < K; ++k, ap += a.ks, b += ldb) {
    V bv[NR];
    for (size_t n = 0; n < NR; ++n) bv[n] = hn::LoadU(d, b + n * N);
    for (size_t r = 0; r < MR; ++r) {
      const V ar = hn::Set(d, ap[r * a.rs]);
      for (size_t n = 0; n < NR; ++n) acc[r][n] = hn::MulAdd(ar, bv[n], acc[r][n]);
    }
  }
  for (size_t r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    if (mode == CMode::kOverwrite) {
      for (size_t n = 0; n < NR; ++n) hn::StoreU(acc[r][n], d, cr + n * N);
    } else {
      const V s = hn::Set(d, mode == CMode::kScaleAccumulate ? row_scale[r] : 1.0f);
      for (size_t n = 0; n < NR; ++n)
        hn::StoreU(hn::MulAdd(s, hn::LoadU(d, cr + n * N), acc[r][n]), d, cr + n * N);
    }
  }
}

// How B is laid out in memory.
struct BOperand {
  const float* p;
  size_t ld;          // row-major: row stride
  size_t panel_rows;  // 0: row-major. Else packed by LoadPanels() for panel_rows rows:
                      // each NR-vector column panel is a dense panel_rows x width block,
                      // so the micro-tile streams it contiguously
  size_t row0;        // panel-major: first row used
  static BOperand RowMajor(const float* p, size_t ld) { return {p, ld, 0, 0}; }
  // Start of the panel holding column vector v (of NR-vector panels) and its stride.
  const float* Panel(size_t v, size_t lanes, size_t width, size_t* ldb) const {
    if (panel_rows == 0) {
      *ldb = ld;
      return p + v * lanes;
    }
    *ldb = width;
    return p + v * lanes * panel_rows + row0 * width;
  }
};

// Remaining column vectors (fewer than NR) after the full panels.
template <size_t MR, size_t NR>
HWY_INLINE void GemmColumnTail(size_t M, size_t vecs, size_t K, StridedA a, const float* b,
                               size_t ldb, float* c, size_t ldc, CMode mode,
                               const float* row_scale) {
  if constexpr (NR > 0) {
    if (vecs == NR) {
      for (size_t r = 0; r < M; r += MR)
        MicroTile<MR, NR>(K, StridedA{a.p + r * a.rs, a.rs, a.ks}, b, ldb, c + r * ldc, ldc, mode,
                          row_scale ? row_scale + r : nullptr);
    } else {
      GemmColumnTail<MR, NR - 1>(M, vecs, K, a, b, ldb, c, ldc, mode, row_scale);
    }
  }
}

// Column panels outermost: the K x (NR·lanes) panel of B stays in L1 while every
// MR-row block of A streams past it.
template <size_t MR, size_t NR>
HWY_INLINE void Gemm(size_t M, size_t ncols, size_t K, StridedA a, BOperand b, float* c, size_t ldc,
                     CMode mode, const float* row_scale = nullptr) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t vecs = ncols / N;
  size_t v = 0;
  size_t ldb;
  for (; v + NR <= vecs; v += NR) {
    const float* bp = b.Panel(v, N, NR * N, &ldb);
    for (size_t r = 0; r < M; r += MR)
      MicroTile<MR, NR>(K, StridedA{a.p + r * a.rs, a.rs, a.ks}, bp, ldb, c + r * ldc + v * N, ldc,
                        mode, row_scale ? row_scale + r : nullptr);
  }
  if (v < vecs) {
    const float* bp = b.Panel(v, N, (vecs - v) * N, &ldb);
    GemmColumnTail<MR, NR - 1>(M, vecs - v, K, a, bp, ldb, c + v * N, ldc, mode, row_scale);
  }
}

// Gemm for any M: whole MR-row blocks, then the remaining M % MR rows as one block of
// that height (each C element is the same FMA chain over k whatever the blocking, so
// results equal those of a padded M). For products whose rows are not padded to MR
// (the backward's dQ over the last q tile of a head).
template <size_t MR, size_t NR>
HWY_INLINE void GemmAnyRows(size_t M, size_t ncols, size_t K, StridedA a, BOperand b, float* c,
                            size_t ldc, CMode mode) {
  const size_t whole = M / MR * MR;
  if (whole > 0) Gemm<MR, NR>(whole, ncols, K, a, b, c, ldc, mode);
  if constexpr (MR > 1) {
    if (whole < M)
      GemmAnyRows<MR - 1, NR>(M - whole, ncols, K, StridedA{a.p + whole * a.rs, a.rs, a.ks}, b,
                              c + whole * ldc, ldc, mode);
  }
}

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASH_CPU_MICROKERNEL_INL_H_
