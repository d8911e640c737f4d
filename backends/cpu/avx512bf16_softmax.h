// The online softmax of the bf16 forwards (forward_avx512bf16.cpp, forward_amx.cpp),
// fused with the bf16 rounding of P into pairs of keys: P is written once, as the
// operand P·V reads, and never stored in f32. Column-wise on Sᵀ as OnlineSoftmax of
// forward-inl.h (the same running max m, sum l of the unrounded P, rescale α, the same
// summation order), with a cheaper 2^x: the softmax only ever needs 2^x for x <= 0,
// and the P it feeds is rounded to bf16.
//
// Exp2NonPositive: x = n + f, n = round(x), |f| <= 0.5; 2^f by a degree-5 polynomial
// with constant term 1 whose coefficients were fitted here for minimal relative error
// on [-0.5, 0.5] (Lawson's iteration on 2001 Chebyshev points): 9.1e-8 in exact
// arithmetic, 1.6e-7 evaluated by Horner in f32 (<= 2.1 ulp measured, 3 asserted by
// tests/cpu/cpu_exp_test.cpp; P is then rounded to bf16, 2^-9); 2^n built in the
// exponent bits, exact at integers. 12 vector operations instead of Exp2's 17 (exp-inl.h: degree 7,
// clamps at both ends, a NaN fix-up); on the AMX forward the softmax is most of the work. Exact
// where it matters: 2^0 = 1 (the row maximum), 2^-inf = +0 (masked keys: x is clamped to -127,
// where f = 0, p = 1 and the exponent field is 0), NaN stays NaN (max returns its second operand
// when either is NaN, and a NaN f keeps p NaN). Valid for x <= 0 only (no overflow clamp): the
// softmax's s·scale − m and m_old − m_new are.
//
// Include inside the kernel region of a file compiled for Highway's AVX3 target with
// avx512bf16 added to its attributes, after forward-inl.h (OnlineSoftmax's scaling
// conventions) and the standard headers (see avx512bf16_pack.h).
#pragma once

#if HWY_TARGET != HWY_AVX3
#error "avx512bf16_softmax.h is AVX3-only code: include it in an HWY_TARGET == HWY_AVX3 region"
#endif

#include <immintrin.h>

#include <limits>

#include "backends/cpu/avx512bf16_pack.h"

namespace flash::cpu::HWY_NAMESPACE {
namespace {

// 2^x for x <= 0 or NaN (see the file comment).
HWY_INLINE __m512 Exp2NonPositive(__m512 x) {
  constexpr float kMinExponent = -127.0f;  // 2^-127 encodes as +0 through the exponent bits
  constexpr int kExponentBias = 127, kMantissaBits = 23;
  // Degree-5 fit of 2^f on [-0.5, 0.5], constant term 1 (f^1 .. f^5).
  constexpr float kC1 = 6.9314700365e-01f, kC2 = 2.4022242427e-01f, kC3 = 5.5507335812e-02f,
                  kC4 = 9.6715129912e-03f, kC5 = 1.3264727313e-03f;
  x = _mm512_max_ps(_mm512_set1_ps(kMinExponent), x);  // NaN: max returns x
  const __m512i n = _mm512_cvt_roundps_epi32(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, _mm512_cvtepi32_ps(n));
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kC5), f, _mm512_set1_ps(kC4));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kC3));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kC2));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kC1));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  const __m512i bits =
      _mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(kExponentBias)), kMantissaBits);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

// Online softmax over Sᵀ rows [0, kb), columns [0, rows) (a multiple of 16): the scores
// in log2 units are s_scale·Sᵀ (s_scale > 0). Updates m and l, writes α, and P as bf16
// pairs of keys: ppack[k·rows + r] = (P[r][2k], P[r][2k+1]) for k < ceil(kb / 2), the
// partner of an odd last key 0 (rounded to nearest even). st is only read.
HWY_INLINE void OnlineSoftmaxPairs(const float* HWY_RESTRICT st, size_t rows, size_t kb,
                                   float* HWY_RESTRICT m, float* HWY_RESTRICT l,
                                   float* HWY_RESTRICT alpha, float s_scale,
                                   uint32_t* HWY_RESTRICT ppack) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 scale = _mm512_set1_ps(s_scale);
  for (size_t c = 0; c < rows; c += kBf16Lanes) {
    const __m512 m_old = _mm512_loadu_ps(m + c);
    __m512 raw_max = neg_inf;
    for (size_t j = 0; j < kb; ++j)
      raw_max = _mm512_max_ps(raw_max, _mm512_loadu_ps(st + j * rows + c));
    const __m512 mx = _mm512_max_ps(m_old, _mm512_mul_ps(raw_max, scale));
    // A row that has seen only masked keys keeps m = -inf; subtract 0 instead so
    // 2^(-inf - (-inf)) never produces NaN.
    const __m512 m_use = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(mx, neg_inf, _CMP_NEQ_UQ), mx);
    const __m512 a = Exp2NonPositive(_mm512_sub_ps(m_old, m_use));
    __m512 sum = _mm512_setzero_ps();
    size_t j = 0;
    for (; j + 1 < kb; j += 2) {
      const __m512 e0 =
          Exp2NonPositive(_mm512_fmsub_ps(_mm512_loadu_ps(st + j * rows + c), scale, m_use));
      const __m512 e1 =
          Exp2NonPositive(_mm512_fmsub_ps(_mm512_loadu_ps(st + (j + 1) * rows + c), scale, m_use));
      sum = _mm512_add_ps(sum, e0);
      sum = _mm512_add_ps(sum, e1);
      _mm512_storeu_si512(ppack + j / 2 * rows + c, PairF32(e0, e1));
    }
    if (j < kb) {  // odd kb: the last key pairs with 0
      const __m512 e0 =
          Exp2NonPositive(_mm512_fmsub_ps(_mm512_loadu_ps(st + j * rows + c), scale, m_use));
      sum = _mm512_add_ps(sum, e0);
      _mm512_storeu_si512(ppack + j / 2 * rows + c, PairF32(e0, _mm512_setzero_ps()));
    }
    _mm512_storeu_ps(l + c, _mm512_fmadd_ps(_mm512_loadu_ps(l + c), a, sum));
    _mm512_storeu_ps(m + c, mx);
    _mm512_storeu_ps(alpha + c, a);
  }
}

}  // namespace
}  // namespace flash::cpu::HWY_NAMESPACE
