// Storage conversions of the reference (and of the tests that feed it): IEEE
// binary16 and bfloat16 <-> float, round-to-nearest-even, NaN preserved. Written
// out bit by bit so the oracle depends on no backend or compiler half type.
#pragma once

#include <cstdint>

namespace flash::reference {

float f16_to_float(uint16_t bits);
uint16_t float_to_f16(float value);
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);

// Element `index` of a tensor of storage type dtype (FLASH_F32/F16/BF16), as double.
double load(const void* base, int32_t dtype, int64_t index);
// Rounds value once to the storage type and writes it.
void store(void* base, int32_t dtype, int64_t index, double value);
// value rounded to the storage type, returned as double.
double round_to(int32_t dtype, double value);

}  // namespace flash::reference
