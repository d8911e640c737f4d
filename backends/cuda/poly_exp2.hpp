// 2^x on the FMA pipe, for a share of a softmax's exponents (FlashAttention-4's remedy for an
// exponent unit that cannot keep up with the tensor cores): the special-function unit does 16
// exponents a cycle per SM, so a tile's softmax waits on it (MUFU.EX2 was the largest stall of
// the Hopper forward under ncu, bench/RESULTS.md session 21) while the FMA pipe, 128 lanes wide,
// has room. Cody-Waite split x = n + f with n = round(x), f in [-1/2, 1/2]; 2^f by a minimax
// polynomial, times 2^n built in an exponent field. Relative error (f32 evaluation, all x in
// [-125, 64]): degree 3 7.5e-5, degree 4 2.7e-6 (ex2.approx: 2^-22 ~ 2.4e-7) — under the half
// ulp of bf16 / f16 that P is rounded to. x < -125 (and -inf) gives +0 exactly, as
// ex2.approx.ftz does for masked scores; NaN stays NaN. Host and device (checked on the host by
// tests/cuda/poly_exp2_test.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FLASH_POLY_EXP2_FN __host__ __device__ __forceinline__
#else
#define FLASH_POLY_EXP2_FN inline
#endif

namespace flash::cuda {

FLASH_POLY_EXP2_FN uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__float_as_int(x));
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FLASH_POLY_EXP2_FN float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(static_cast<int>(u));
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// The degree the kernels use (A/B builds: FLASH_POLY_EXP_DEGREE).
#ifndef FLASH_POLY_EXP_DEGREE
#define FLASH_POLY_EXP_DEGREE 4
#endif
constexpr int kPolyExpDegree = FLASH_POLY_EXP_DEGREE;

// Below this 2^x is +0 (2^n is then built in the exponent field: n + 127 >= 2).
constexpr float kPolyExp2Min = -125.f;

template <int kDegree = 4>
FLASH_POLY_EXP2_FN float poly_exp2(float x) {
  static_assert(kDegree == 3 || kDegree == 4, "fitted degrees: 3, 4");
  // x + (1.5·2^23 + 127) rounds x to an integer: t's low mantissa bits hold n + 127 (|x| < 2^22).
  constexpr float kRoundShift = 12583039.f;
  const float t = x + kRoundShift;
  const float f = x - (t - kRoundShift);
  // Minimax in relative error of 2^f on [-1/2, 1/2] (Lawson iterations, f32 coefficients).
  float p;
  if constexpr (kDegree == 3) {
    p = fmaf(fmaf(fmaf(0.0551716685f, f, 0.242611125f), f, 0.693260968f), f, 0.999928057f);
  } else {
    p = fmaf(fmaf(fmaf(fmaf(0.00957010128f, f, 0.0559178591f), f, 0.240247443f), f, 0.693121791f),
             f, 0.999999285f);
  }
  // 2^n: t's bits are 0x4B400000 + n + 127, and shifted by 23 only n + 127 stays, in the
  // exponent field. A product rather than an integer add into p's exponent, so that NaN
  // (whose bits would add up to a number) stays NaN.
  const float y = p * bits_float(float_bits(t) << 23);
  return x < kPolyExp2Min ? 0.f : y;
}

}  // namespace flash::cuda

#undef FLASH_POLY_EXP2_FN
