// Vectorised 2^x for the softmax (per-target code; included by the kernels).
//
// Algorithm: x = n + f with n = round(x), |f| <= 0.5; 2^f from its Taylor series in
// f·ln2 to degree 7 (truncation error < 6e-9 relative, below half an ulp), evaluated
// by Horner with FMAs; 2^n is built directly in the exponent bits.
// Accuracy (tests/cpu/cpu_exp_test.cpp measures it against std::exp2 in double):
// <= 2 ulp for x in [-126, 127.5); exactly 1 at x = 0; exactly 0 for x <= -127 and
// x = -inf (results that would be subnormal, < 2^-126.5, flush to 0: irrelevant next
// to the row maximum, which the softmax always maps to 2^0); +inf for x >= 127.5;
// NaN stays NaN. The softmax uses exp(s - m) = 2^(s·log2e - m·log2e) with log2(e)
// folded into the query scale, so this is the only transcendental in the loop.

#if defined(FLASH_CPU_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASH_CPU_EXP_INL_H_
#undef FLASH_CPU_EXP_INL_H_
#else
#define FLASH_CPU_EXP_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp2(D d, V x) {
  const hn::RebindToSigned<D> di;
  // Clamp so the exponent field stays in [0, 255]: 2^-127 encodes as +0.0 and 2^128
  // as +inf; -inf clamps to -127 and gives exactly 0.
  const V clamped = hn::Min(hn::Max(x, hn::Set(d, -127.0f)), hn::Set(d, 128.0f));
  const auto n = hn::NearestInt(clamped);
  const V f = hn::Sub(clamped, hn::ConvertTo(d, n));  // in [-0.5, 0.5]
  // Taylor coefficients of 2^f = e^(f ln2): ln2^k / k!.
  V p = hn::Set(d, 1.5252733804059840e-05f);                  // k = 7
  p = hn::MulAdd(p, f, hn::Set(d, 1.5403530393381606e-04f));  // k = 6
  p = hn::MulAdd(p, f, hn::Set(d, 1.3333558146428443e-03f));  // k = 5
  p = hn::MulAdd(p, f, hn::Set(d, 9.6181291076284772e-03f));  // k = 4
  p = hn::MulAdd(p, f, hn::Set(d, 5.5504108664821580e-02f));  // k = 3
  p = hn::MulAdd(p, f, hn::Set(d, 2.4022650695910071e-01f));  // k = 2
  p = hn::MulAdd(p, f, hn::Set(d, 6.9314718055994531e-01f));  // k = 1
  p = hn::MulAdd(p, f, hn::Set(d, 1.0f));
  const V two_n = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n, hn::Set(di, 127))));
  const V result = hn::Mul(p, two_n);
  // Max/Min do not reliably keep NaN on every target: put it back.
  return hn::IfThenElse(hn::IsNaN(x), x, result);
}

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASH_CPU_EXP_INL_H_
