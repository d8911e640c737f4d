// The avx512bf16 target of the CPU backend: a bf16 forward whose two products run on
// vdpbf16ps (forward_avx512bf16.cpp), beside the Highway targets. Plain C++: this
// header is read by code that runs on any x86-64 CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/cpu/cpu_plan.h"
#include "dispatch/module_abi.h"

namespace flash::cpu {

// Register blocking of the vdpbf16ps micro-kernels (32 zmm registers; one instruction
// is 16 f32 lanes x 2 bf16 products).
struct Bf16Tiles {
  static constexpr size_t kLanes = 16;
  static constexpr size_t kRegisters = 32;
  // Sᵀ = K·Qᵀ: kQkMR keys (broadcast bf16 pairs of K) x kQkNR vectors of query rows.
  static constexpr size_t kQkMR = 8, kQkNR = 3;
  // O += P·V: kPvMR query rows (broadcast bf16 pairs of P) x kPvNR vectors of head_dim_v.
  static constexpr size_t kPvMR = 6, kPvNR = 4;
  static_assert(kQkMR * kQkNR + kQkNR + 1 <= kRegisters, "QK micro-tile spills");
  static_assert(kPvMR * kPvNR + kPvNR + 1 <= kRegisters, "PV micro-tile spills");
};

// f16 inputs stay on the f32 Highway kernels: rounding them to bf16 (8 significant
// bits instead of 11) gives errors ~8x those of naive f16 attention, outside the
// tolerance rule (2x naive in the same dtype). Measured: see forward_avx512bf16.cpp.
constexpr bool kBf16TakesF16 = false;

// Why the avx512bf16 forward does not take problem p, or nullptr when it does. Every
// head_dim >= 1 and head_dim_v >= 1 are taken (odd head_dim is padded with a zero
// product pair, head_dim_v with zero columns); only the dtype decides.
inline const char* Avx512Bf16Declines(const flash_problem& p) {
  if (p.dtype == FLASH_F32) return "f32 inputs (the bf16 products would round them)";
  if (p.dtype == FLASH_F16 && !kBf16TakesF16) return "f16 inputs (bf16 loses 3 bits of them)";
  return nullptr;
}

// "" when this CPU and OS run the avx512bf16 kernels, else what is missing (named as
// /proc/cpuinfo and CPUID name it).
std::string Avx512Bf16Missing();

// A work item of a Plan (same Plan and tiles as the avx512 Highway target).
using ItemFn = void (*)(const Plan&, int64_t item);
using ForwardItemFn = ItemFn;

// The forward work item, or nullptr when this build compiled no AVX-512 code.
ForwardItemFn Avx512Bf16ForwardItem();

// For tests: out[i] = 2^in[i] by the bf16 kernels' softmax exponential
// (Exp2NonPositive, avx512bf16_softmax.h; valid for in[i] <= 0), or nullptr without
// AVX-512 code. Runs where avx512bf16 does.
using Exp2ArrayFn = void (*)(const float* in, float* out, size_t n);
Exp2ArrayFn Avx512Bf16Exp2Array();

// The backward's dK/dV and dQ work items on vdpbf16ps (backward_avx512bf16.cpp; the
// delta pass stays on the avx512 kernels), or nullptr without AVX-512 code. They take
// the problems Avx512Bf16Declines() accepts (the amx target has its own, amx.h).
ItemFn Avx512Bf16BackwardKvItem();
ItemFn Avx512Bf16BackwardQItem();

}  // namespace flash::cpu
