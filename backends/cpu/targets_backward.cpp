// The two-pass backward's entry points (backward-inl.h: delta, dK/dV and dQ items),
// compiled once per SIMD target (Highway foreach_target; targets.cpp holds the
// dispatch tables that point at them).

// Order matters: foreach_target.h re-includes this file once per target, before the
// per-target headers below are first seen.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/targets_backward.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "backends/cpu/backward-inl.h"
#include "backends/cpu/target_kernels-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {

void BackwardDeltaItem(const Plan& plan, int64_t item) { BackwardDeltaItemImpl(plan, item); }
void BackwardKvItem(const Plan& plan, int64_t item) { BackwardKvItemImpl(plan, item); }
void BackwardQItem(const Plan& plan, int64_t item) { BackwardQItemImpl(plan, item); }

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
