// The forward kernel's entry point (forward-inl.h),
// compiled once per SIMD target (Highway foreach_target; targets.cpp holds the
// dispatch tables that point at them).

// Order matters: foreach_target.h re-includes this file once per target, before the
// per-target headers below are first seen.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/targets_forward.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "backends/cpu/forward-inl.h"
#include "backends/cpu/target_kernels-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {

void ForwardItem(const Plan& plan, int64_t item) { ForwardItemImpl(plan, item); }

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
