// The SIMD targets compiled into the CPU backend and the one chosen for a call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/cpu_plan.h"
#include "backends/cpu/decode_plan.h"

namespace flash::cpu {

// One compiled SIMD target's kernels (function pointers from Highway's dispatch table).
struct TargetKernels {
  const char* name;    // "amx", "avx512bf16", "avx512", "avx2", "sse4", "scalar" (FLASH_CPU_TARGET)
  int64_t hwy_target;  // HWY_AVX3, ...
  TargetTiles tiles;
  void (*forward_item)(const Plan&, int64_t item);
  void (*backward_delta_item)(const Plan&, int64_t item);
  void (*backward_kv_item)(const Plan&, int64_t item);
  void (*backward_q_item)(const Plan&, int64_t item);
  void (*decode_item)(const DecodePlan&, int64_t item);     // decode-inl.h
  void (*decode_combine)(const DecodePlan&, int64_t unit);  // unit = b·heads_kv + h
  void (*exp2)(const float* in, float* out, size_t n);      // for tests
  // amx and avx512bf16 only (forward_amx.cpp, forward_avx512bf16.cpp): the bf16 forward
  // for the problems Avx512Bf16Declines() accepts; everything else runs the Highway
  // kernels above, those of highway_name. Null on the Highway targets.
  void (*bf16_forward_item)(const Plan&, int64_t item) = nullptr;
  // amx and avx512bf16 only: the target's bf16 backward dK/dV and dQ items (tiles:
  // backward_amx.cpp, vdpbf16ps: backward_avx512bf16.cpp; the delta pass is
  // backward_delta_item's) for the same problems.
  void (*bf16_backward_kv_item)(const Plan&, int64_t item) = nullptr;
  void (*bf16_backward_q_item)(const Plan&, int64_t item) = nullptr;
  const char* highway_name = name;  // the Highway target whose kernels the rest uses
  // The fused f32/f16 backward item (backward-inl.h; item = batch, kv head), where
  // choose() takes it (FusedBackward in cpu_plan.h). The bf16 targets keep the avx512 one.
  void (*backward_fused_item)(const Plan&, int64_t item) = nullptr;
};

// Targets this binary has and this CPU runs, best first. Never empty (scalar).
const std::vector<TargetKernels>& SupportedTargets();

// "amx,avx512bf16,avx512,avx2,sse4,scalar" style list of SupportedTargets().
std::string SupportedList();

// Known targets this CPU lacks, each with the missing feature in parentheses (which may
// hold commas and parentheses of its own), separated by ", ": "amx (needs AMX-TILE ...),
// avx512bf16 (needs ...)" ("" when none). probe() reports it so test suites can skip by
// name.
std::string UnsupportedList();

// The target for this call: FLASH_CPU_TARGET if set (read on every call, so tests can
// switch with setenv), else the best supported. Throws flash::Error naming the valid
// values when FLASH_CPU_TARGET is unknown or not supported here.
const TargetKernels& SelectTarget();

}  // namespace flash::cpu
