// vdpbf16ps micro-kernels shared by the bf16 kernels of the avx512bf16 target
// (forward_avx512bf16.cpp, backward_avx512bf16.cpp): C (+)= A·B with A and B as bf16
// pairs along the reduction dimension (one 32-bit word = two consecutive elements of
// it, low half first). Per pair step a micro-tile loads NR vectors of B (16 columns of
// pairs each), broadcasts MR words of A and issues MR·NR vdpbf16ps (16 lanes x 2
// products), keeping MR x NR vectors of C in registers (Bf16Tiles in avx512bf16.h).
// Two layouts of A, named by where a row's pairs lie:
//   RowPairs  A(i, p) = a[i·lda + p]: each row's pairs are contiguous (K or V rows for
//             Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ; Pᵀ and dSᵀ rows for dV and dK);
//   ColPairs  A(i, p) = a[p·lda + i]: pair-major (P pairs for P·V, dS pairs for dQ), with
//             B packed in panels of kPanel columns.
//
// Include inside the kernel region of a file compiled for Highway's AVX3 target with
// avx512bf16 added to its attributes, after avx512bf16.h and the standard headers
// (see avx512bf16_pack.h).
#pragma once

#if HWY_TARGET != HWY_AVX3
#error "avx512bf16_microkernel.h is AVX3-only code: include it in an HWY_TARGET == HWY_AVX3 region"
#endif

#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/avx512bf16.h"
#include "backends/cpu/avx512bf16_pack.h"

namespace flash::cpu::HWY_NAMESPACE {
namespace {

using BT = Bf16Tiles;
constexpr size_t kPanel = BT::kPvNR * BT::kLanes;  // columns of a ColPairs B panel

// C[i][n] = scale·Σ_p A(i, p)·B(p, n), or C += Σ_p A(i, p)·B(p, n) with accumulate, for
// MR rows and NR vectors. A(i, p) = a[i·lda + p]; B(p, :) = b + p·ldb (NR vectors).
template <size_t MR, size_t NR>
HWY_INLINE void RowPairsBlock(const uint32_t* HWY_RESTRICT a, size_t lda,
                              const uint32_t* HWY_RESTRICT b, size_t ldb, size_t pairs,
                              float* HWY_RESTRICT c, size_t ldc, float scale, bool accumulate) {
  __m512 acc[MR][NR];
  for (size_t i = 0; i < MR; ++i)
    for (size_t n = 0; n < NR; ++n)
      acc[i][n] = accumulate ? _mm512_loadu_ps(c + i * ldc + n * 16) : _mm512_setzero_ps();
  for (size_t p = 0; p < pairs; ++p) {
    __m512bh bv[NR];
    for (size_t n = 0; n < NR; ++n) bv[n] = (__m512bh)_mm512_loadu_si512(b + p * ldb + n * 16);
    for (size_t i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i * lda + p]));
      for (size_t n = 0; n < NR; ++n) acc[i][n] = _mm512_dpbf16_ps(acc[i][n], av, bv[n]);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
  for (size_t i = 0; i < MR; ++i)
    for (size_t n = 0; n < NR; ++n)
      _mm512_storeu_ps(c + i * ldc + n * 16, accumulate ? acc[i][n] : _mm512_mul_ps(acc[i][n], s));
}

// RowPairsBlock over C[M x ncols]: M a multiple of kQkMR rows, ncols of 16 columns.
HWY_INLINE void RowPairsGemm(size_t M, size_t ncols, size_t pairs, const uint32_t* a, size_t lda,
                             const uint32_t* b, size_t ldb, float* c, size_t ldc, float scale,
                             bool accumulate = false) {
  constexpr size_t MR = BT::kQkMR, NR = BT::kQkNR, N = BT::kLanes;
  for (size_t i = 0; i < M; i += MR)
    for (size_t n = 0; n < ncols; n += NR * N) {
      const uint32_t* ai = a + i * lda;
      float* ci = c + i * ldc + n;
      switch (std::min(NR, (ncols - n) / N)) {
        case 3:
          RowPairsBlock<MR, 3>(ai, lda, b + n, ldb, pairs, ci, ldc, scale, accumulate);
          break;
        case 2:
          RowPairsBlock<MR, 2>(ai, lda, b + n, ldb, pairs, ci, ldc, scale, accumulate);
          break;
        default:
          RowPairsBlock<MR, 1>(ai, lda, b + n, ldb, pairs, ci, ldc, scale, accumulate);
          break;
      }
    }
  static_assert(BT::kQkNR == 3, "the switch above covers 1..kQkNR vectors");
}

// C[i][c] (+)= Σ_p A(i, p)·B(p, c) for MR rows and NR vectors of one B panel.
// a: A(0, first pair), A(i, p) = a[p·lda + i]; bp: the panel at the first pair (pair
// stride w). alpha: per-row scale of C before accumulating, or null. kMasked: B pairs
// ANDed with bmask (one element of a pair kept, the other zeroed).
template <size_t MR, size_t NR, bool kMasked = false>
HWY_INLINE void ColPairsBlock(const uint32_t* HWY_RESTRICT a, size_t lda,
                              const uint32_t* HWY_RESTRICT bp, size_t w, size_t pairs, float* c,
                              size_t ldc, const float* alpha,
                              __m512i bmask = _mm512_set1_epi32(-1)) {
  __m512 acc[MR][NR];
  for (size_t i = 0; i < MR; ++i) {
    const __m512 s = _mm512_set1_ps(alpha ? alpha[i] : 1.0f);
    for (size_t n = 0; n < NR; ++n) {
      acc[i][n] = _mm512_loadu_ps(c + i * ldc + n * 16);
      if (alpha) acc[i][n] = _mm512_mul_ps(acc[i][n], s);
    }
  }
  for (size_t p = 0; p < pairs; ++p) {
    __m512bh bv[NR];
    for (size_t n = 0; n < NR; ++n) {
      __m512i x = _mm512_loadu_si512(bp + p * w + n * 16);
      if (kMasked) x = _mm512_and_si512(x, bmask);
      bv[n] = (__m512bh)x;
    }
    for (size_t i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[p * lda + i]));
      for (size_t n = 0; n < NR; ++n) acc[i][n] = _mm512_dpbf16_ps(acc[i][n], av, bv[n]);
    }
  }
  for (size_t i = 0; i < MR; ++i)
    for (size_t n = 0; n < NR; ++n) _mm512_storeu_ps(c + i * ldc + n * 16, acc[i][n]);
}

// ColPairsBlock over pairs [p0, p0 + pairs) for MR rows and every panel of B (c_pad
// columns; B packed as panels of kPanel columns, panel c0 a dense b_pairs x w block at
// bpack + c0·b_pairs). C rows are c_pad floats apart.
template <size_t MR, bool kMasked = false>
HWY_INLINE void ColPairsRows(const uint32_t* a, size_t lda, const uint32_t* bpack, size_t b_pairs,
                             size_t c_pad, size_t p0, size_t pairs, float* c, const float* alpha,
                             __m512i bmask = _mm512_set1_epi32(-1)) {
  for (size_t c0 = 0; c0 < c_pad; c0 += kPanel) {
    const size_t w = std::min(kPanel, c_pad - c0);
    const uint32_t* bp = bpack + c0 * b_pairs + p0 * w;
    const uint32_t* ap = a + p0 * lda;
    float* cc = c + c0;
    switch (w / BT::kLanes) {
      case 4:
        ColPairsBlock<MR, 4, kMasked>(ap, lda, bp, w, pairs, cc, c_pad, alpha, bmask);
        break;
      case 3:
        ColPairsBlock<MR, 3, kMasked>(ap, lda, bp, w, pairs, cc, c_pad, alpha, bmask);
        break;
      case 2:
        ColPairsBlock<MR, 2, kMasked>(ap, lda, bp, w, pairs, cc, c_pad, alpha, bmask);
        break;
      default:
        ColPairsBlock<MR, 1, kMasked>(ap, lda, bp, w, pairs, cc, c_pad, alpha, bmask);
        break;
    }
  }
  static_assert(BT::kPvNR == 4, "the switch above covers 1..kPvNR vectors");
}

// Rows [0, rows) of bf16 matrix x (row stride ld_x elements, >= 16-element vectors of
// c_pad columns) as pairs of consecutive rows in panels (the ColPairs B layout):
// out[c0·pairs + p·w + (c - c0)] = (x[2p][c], x[2p+1][c]) for p < pairs, panel width w
// = min(kPanel, c_pad - c0). x must hold 2·pairs rows. With kZeroNonFinite, inf and
// NaN elements become 0 (see the dQ product of backward_avx512bf16.cpp).
template <bool kZeroNonFinite = false>
HWY_INLINE void PairRowsToPanels(const uint16_t* x, size_t ld_x, size_t pairs, size_t c_pad,
                                 uint32_t* out) {
  const __m512i exponent = _mm512_set1_epi16(0x7f80);
  for (size_t pr = 0; pr < pairs; ++pr)
    for (size_t c = 0; c < c_pad; c += BT::kLanes) {
      const uint16_t* lo = x + 2 * pr * ld_x + c;
      const __m512i ab = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + ld_x)), 1);
      __m512i pairs16 = ab;
      if (kZeroNonFinite) {
        const __mmask32 bad = _mm512_cmpeq_epi16_mask(_mm512_and_si512(ab, exponent), exponent);
        pairs16 = _mm512_maskz_mov_epi16(~bad, ab);
      }
      const size_t c0 = c / kPanel * kPanel, w = std::min(kPanel, c_pad - c0);
      _mm512_storeu_si512(out + c0 * pairs + pr * w + (c - c0), InterleaveHalves(pairs16));
    }
}

}  // namespace
}  // namespace flash::cpu::HWY_NAMESPACE
