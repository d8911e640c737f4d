// Per-target entry points of the Highway kernels (per-target code): declared here for
// targets.cpp, whose HWY_EXPORT tables point at them, and defined by
// targets_forward.cpp, targets_backward.cpp, targets_backward_fused.cpp and
// targets_decode.cpp (one translation unit per kernel family, compiled in parallel).

#if defined(FLASH_CPU_TARGET_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASH_CPU_TARGET_KERNELS_INL_H_
#undef FLASH_CPU_TARGET_KERNELS_INL_H_
#else
#define FLASH_CPU_TARGET_KERNELS_INL_H_
#endif

#include <cstdint>

#include "backends/cpu/cpu_plan.h"
#include "backends/cpu/decode_plan.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {

void ForwardItem(const Plan& plan, int64_t item);          // targets_forward.cpp
void BackwardDeltaItem(const Plan& plan, int64_t item);    // targets_backward.cpp
void BackwardKvItem(const Plan& plan, int64_t item);       // targets_backward.cpp
void BackwardQItem(const Plan& plan, int64_t item);        // targets_backward.cpp
void BackwardFusedItem(const Plan& plan, int64_t item);    // targets_backward_fused.cpp
void DecodeItem(const DecodePlan& plan, int64_t item);     // targets_decode.cpp
void DecodeCombine(const DecodePlan& plan, int64_t unit);  // targets_decode.cpp

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASH_CPU_TARGET_KERNELS_INL_H_
