// Element conversion between the storage dtypes and float, for filling inputs and
// reading outputs back. f16 goes through the compiler's _Float16 (exact IEEE
// conversion with round-to-nearest-even); bf16 is the top half of an f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "flash/flash.hpp"

namespace bench {

inline size_t element_size(flash::DType dtype) {
  return dtype == flash::DType::f32 ? sizeof(float) : sizeof(uint16_t);
}

inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays a quiet NaN
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16_to_float(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

inline uint16_t float_to_f16(float value) {
  const _Float16 half = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &half, sizeof(bits));
  return bits;
}

inline float f16_to_float(uint16_t bits) {
  _Float16 half;
  std::memcpy(&half, &bits, sizeof(half));
  return static_cast<float>(half);
}

// Element i of a buffer of the given dtype, as float.
inline float load_as_float(const void* data, size_t i, flash::DType dtype) {
  switch (dtype) {
    case flash::DType::f32:
      return static_cast<const float*>(data)[i];
    case flash::DType::f16:
      return f16_to_float(static_cast<const uint16_t*>(data)[i]);
    case flash::DType::bf16:
      return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
  }
  return 0.0f;
}

inline void store_from_float(void* data, size_t i, flash::DType dtype, float value) {
  switch (dtype) {
    case flash::DType::f32:
      static_cast<float*>(data)[i] = value;
      return;
    case flash::DType::f16:
      static_cast<uint16_t*>(data)[i] = float_to_f16(value);
      return;
    case flash::DType::bf16:
      static_cast<uint16_t*>(data)[i] = float_to_bf16(value);
      return;
  }
}

}  // namespace bench
