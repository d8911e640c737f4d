// Scalar f32 -> f16 / bf16 conversion with round-to-nearest-even, used once per
// output element (o, dq, dk, dv) when a tile is written back. Output writes are
// O(rows x head_dim) per item against O(rows x keys x head_dim) of work, so scalar is
// not a bottleneck, and it is exact on every target (no dependence on what a SIMD
// target's demotion rounds like).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "dispatch/module_abi.h"

namespace flash::cpu {

inline uint16_t Bf16FromF32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // ties to even; overflow carries into inf correctly
  return static_cast<uint16_t>(u >> 16);
}

inline uint16_t F16FromF32(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf (ties to even)
  if (x < 0x38800000u) {                        // below 2^-14: subnormal half or zero
    float v;
    std::memcpy(&v, &x, 4);
    // v·2^24 is exact; nearbyint rounds ties to even in the default rounding mode.
    return sign | static_cast<uint16_t>(std::nearbyint(v * 16777216.0f));
  }
  uint32_t r = x - 0x38000000u;    // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);  // ties to even on the 13 dropped bits
  return sign | static_cast<uint16_t>(r >> 13);
}

// f16 -> f32, exact, with inf and NaN preserved. For SIMD targets without a hardware
// f16 conversion (SSE4, scalar), whose emulated promotion turns inf/NaN into finite
// values in Highway 1.0.3.
inline float F32FromF16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf / NaN
  } else if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);  // m·2^-24
    return sign ? -magnitude : magnitude;
  } else {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // rebias 15 -> 127
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Writes n f32 values to dst (dtype), multiplied by `scale`.
inline void StoreFromF32(int32_t dtype, const float* src, size_t n, float scale, void* dst) {
  if (dtype == FLASH_F32) {
    float* out = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) out[i] = src[i] * scale;
  } else if (dtype == FLASH_F16) {
    uint16_t* out = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) out[i] = F16FromF32(src[i] * scale);
  } else {
    uint16_t* out = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) out[i] = Bf16FromF32(src[i] * scale);
  }
}

}  // namespace flash::cpu
