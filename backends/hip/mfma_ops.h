// CDNA matrix-core building blocks for the MFMA kernels (hipcc only, gfx90a / gfx908).
//
// One instruction shape is used throughout: a 32x32 f32 accumulator += A(32x8)·B(8x32)
// with 16-bit inputs, executed by one wave64. Operand and result layouts (the MFMA
// register layout of CDNA1/CDNA2), with col = lane % 32 and half = lane / 32:
//   A[i][k]: lane i + 32*(k/4) holds element k%4 of its 4-vector  (i = col, k = 4*half+e)
//   B[k][j]: lane j + 32*(k/4) holds element k%4                  (j = col, k = 4*half+e)
//   C[i][j]: lane j + 32*((i/4)%2), register (i%4) + 4*(i/8)   -> i = 8*(r/4) + 4*half + r%4
// The kernels rely on the consequence that an accumulator's registers 4*s..4*s+3 are
// exactly the B operand of k-step s of a following MFMA whose K index is the
// accumulator's row index, so P (or dS) feeds the next product without any shuffle.
#pragma once

#include <cstdint>

#include "portability.h"

#if !FLASH_HIP_ON_AMD
#error "mfma_ops.h is for hipcc builds only"
#endif

// Device passes for CDNA targets emit MFMA instructions. Other targets (a build for
// e.g. "gfx90a;gfx1030") compile the MFMA kernels to a trap: choose() only selects them
// on gfx90a/gfx908 devices, and the host pass never executes device code.
#if defined(__HIP_DEVICE_COMPILE__) && (defined(__gfx90a__) || defined(__gfx908__))
#define FLASH_MFMA_TARGET 1
#else
#define FLASH_MFMA_TARGET 0
#endif

namespace flash::hip::mfma {


constexpr int kWave = 64;  // MFMA operand layouts are defined for wave64
constexpr int kTile = 32;  // M = N of the instruction
constexpr int kStepK = 8;  // K of one instruction

using Acc = float __attribute__((ext_vector_type(16)));
using Bits4 = uint16_t __attribute__((ext_vector_type(4)));

// Stand-in for the instruction where it does not exist (see FLASH_MFMA_TARGET).
FLASH_DEVICE Acc no_mfma(Acc c) {
#if defined(__HIP_DEVICE_COMPILE__)
  __builtin_trap();
#endif
  return c;
}

FLASH_DEVICE int lane_id() { return static_cast<int>(threadIdx.x) % kWave; }
FLASH_DEVICE int lane_col() { return lane_id() % kTile; }
FLASH_DEVICE int lane_half() { return lane_id() / kTile; }
// Row of accumulator register r for this lane (see the layout above).
FLASH_DEVICE int acc_row(int r) { return 8 * (r / 4) + 4 * lane_half() + r % 4; }

// The two 32-lane halves of a wave hold the same accumulator column.
FLASH_DEVICE float across_halves_max(float v) { return fmaxf(v, __shfl_xor(v, kTile, kWave)); }
FLASH_DEVICE float across_halves_sum(float v) { return v + __shfl_xor(v, kTile, kWave); }

template <class T>
struct Ops;

template <>
struct Ops<Half> {
  using Operand = _Float16 __attribute__((ext_vector_type(4)));
  static FLASH_DEVICE Acc mma(Operand a, Operand b, Acc c) {
#if FLASH_MFMA_TARGET
    return __builtin_amdgcn_mfma_f32_32x32x8f16(a, b, c, 0, 0, 0);
#else
    (void)a, (void)b;
    return no_mfma(c);
#endif
  }
};

template <>
struct Ops<BFloat16> {
  using Operand = short __attribute__((ext_vector_type(4)));
  static FLASH_DEVICE Acc mma(Operand a, Operand b, Acc c) {
#if FLASH_MFMA_TARGET && defined(__gfx90a__)
    return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
#elif FLASH_MFMA_TARGET && defined(__gfx908__)
    // gfx908 has no bf16 K=8 instruction; two K=4 steps. The K=4 layout puts k at
    // lane half k/2, element k%2; feeding elements {0,1} then {2,3} of the same
    // vectors pairs A and B elements identically, so the sum over k is unchanged.
    using Pair = short __attribute__((ext_vector_type(2)));
    const Pair a_lo = {a[0], a[1]}, a_hi = {a[2], a[3]};
    const Pair b_lo = {b[0], b[1]}, b_hi = {b[2], b[3]};
    c = __builtin_amdgcn_mfma_f32_32x32x4bf16(a_lo, b_lo, c, 0, 0, 0);
    return __builtin_amdgcn_mfma_f32_32x32x4bf16(a_hi, b_hi, c, 0, 0, 0);
#else
    (void)a, (void)b;
    return no_mfma(c);
#endif
  }
};

template <class T>
using Operand = typename Ops<T>::Operand;

// Four consecutive 16-bit values (8-byte aligned) of an LDS row as an operand.
template <class T>
FLASH_DEVICE Operand<T> load_operand(const uint16_t* lds) {
  return __builtin_bit_cast(Operand<T>, *reinterpret_cast<const Bits4*>(lds));
}

template <class T>
FLASH_DEVICE uint16_t bits_of(float f) {
  return from_float<T>(f).bits;
}

// Operand from four f32 values, rounded to the storage type.
template <class T>
FLASH_DEVICE Operand<T> pack_operand(float a, float b, float c, float d) {
  Bits4 v = {bits_of<T>(a), bits_of<T>(b), bits_of<T>(c), bits_of<T>(d)};
  return __builtin_bit_cast(Operand<T>, v);
}

FLASH_DEVICE Acc zero_acc() {
  Acc z;
#pragma unroll
  for (int r = 0; r < 16; ++r) z[r] = 0.f;
  return z;
}

}  // namespace flash::hip::mfma
