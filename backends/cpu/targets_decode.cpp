// The decode kernel's entry points (decode-inl.h),
// compiled once per SIMD target (Highway foreach_target; targets.cpp holds the
// dispatch tables that point at them).

// Order matters: foreach_target.h re-includes this file once per target, before the
// per-target headers below are first seen.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/targets_decode.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "backends/cpu/decode-inl.h"
#include "backends/cpu/target_kernels-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {

void DecodeItem(const DecodePlan& plan, int64_t item) { DecodeItemImpl(plan, item); }
void DecodeCombine(const DecodePlan& plan, int64_t unit) { DecodeCombineImpl(plan, unit); }

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
