#include "reference/dtype.hpp"

#include <cmath>
#include <cstring>

#include "dispatch/module_abi.h"

namespace flash::reference {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

float bf16_to_float(uint16_t bits) { return float_of(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_bf16(float value) {
  uint32_t u = bits_of(value);
  if (std::isnan(value)) return static_cast<uint16_t>((u >> 16) | 0x40);  // keep it a NaN
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const int exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0x1F) return float_of(sign | 0x7F800000 | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return float_of(sign | static_cast<uint32_t>(exponent - 15 + 127) << 23 | (mantissa << 13));
}

uint16_t float_to_f16(float value) {
  const uint16_t sign = (bits_of(value) >> 16) & 0x8000;
  const float magnitude = std::fabs(value);
  if (std::isnan(value)) return sign | 0x7E00;
  if (magnitude >= 65520.0f) return sign | 0x7C00;  // rounds to infinity
  if (magnitude < std::ldexp(1.0f, -14)) {
    // Subnormal range: multiples of 2^-24; nearbyint rounds ties to even.
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(magnitude, 24)));
  }
  int exponent;
  const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent
  // 11 significant bits: round fraction*2^11 to an integer in [1024, 2048].
  auto significand = static_cast<uint32_t>(std::nearbyint(std::ldexp(fraction, 11)));
  if (significand == 2048) {
    significand = 1024;
    ++exponent;
  }
  const uint32_t biased = static_cast<uint32_t>(exponent - 1 + 15);
  if (biased >= 31) return sign | 0x7C00;
  return sign | static_cast<uint16_t>(biased << 10 | (significand - 1024));
}

double load(const void* base, int32_t dtype, int64_t index) {
  switch (dtype) {
    case FLASH_F32:
      return static_cast<const float*>(base)[index];
    case FLASH_F16:
      return f16_to_float(static_cast<const uint16_t*>(base)[index]);
    default:
      return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
  }
}

void store(void* base, int32_t dtype, int64_t index, double value) {
  // Round once from double: double -> float is exact enough for the 16-bit types
  // except in pathological double-rounding ties, which random data never hits.
  const float f = static_cast<float>(value);
  switch (dtype) {
    case FLASH_F32:
      static_cast<float*>(base)[index] = f;
      break;
    case FLASH_F16:
      static_cast<uint16_t*>(base)[index] = float_to_f16(f);
      break;
    default:
      static_cast<uint16_t*>(base)[index] = float_to_bf16(f);
      break;
  }
}

double round_to(int32_t dtype, double value) {
  const float f = static_cast<float>(value);
  switch (dtype) {
    case FLASH_F32:
      return f;
    case FLASH_F16:
      return f16_to_float(float_to_f16(f));
    default:
      return bf16_to_float(float_to_bf16(f));
  }
}

}  // namespace flash::reference
