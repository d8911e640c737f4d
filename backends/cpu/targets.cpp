// Maps the FLASH_CPU_TARGET names onto Highway's dispatch tables (HWY_EXPORT) of the
// kernels compiled once per SIMD target (Highway foreach_target). Targets are set by the
// CMake definitions HWY_COMPILE_ALL_ATTAINABLE and HWY_DISABLED_TARGETS: AVX-512
// (AVX3), AVX2, SSE4 and the portable scalar target are compiled, whatever -march says,
// unless FLASHATTN_HWY_DISABLED_TARGETS leaves one out (CI's sanitizer builds leave out
// what their machine cannot run). The kernels' per-target entry points are defined in
// translation units of their own (targets_forward.cpp, targets_backward.cpp,
// targets_backward_fused.cpp, targets_decode.cpp; declared in target_kernels-inl.h), so a
// parallel build compiles them side by side: as one unit they were the longest compile of
// the tree (~80 s with gcc -O3, ~11 min under clang's ASan + UBSan + fuzzer instrumentation
// in CI, all on one core).

// Order matters: foreach_target.h re-includes this file once per target, before the
// per-target headers below are first seen.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/targets.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "backends/cpu/exp-inl.h"
#include "backends/cpu/target_kernels-inl.h"
#include "backends/cpu/tiles-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace flash::cpu::HWY_NAMESPACE {

TargetTiles GetTiles() { return MakeTargetTiles(); }

void Exp2Array(const float* in, float* out, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(Exp2(d, hn::LoadU(d, in + i)), d, out + i);
  for (; i < n; ++i) {
    HWY_ALIGN float buf[hn::MaxLanes(d)] = {};
    buf[0] = in[i];
    hn::Store(Exp2(d, hn::Load(d, buf)), d, buf);
    out[i] = buf[0];
  }
}

}  // namespace flash::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "backends/cpu/targets.h"

#include <cstdlib>
#include <cstring>

#include "backends/cpu/amx.h"
#include "backends/cpu/avx512bf16.h"
#include "flash/flash.hpp"

namespace flash::cpu {

HWY_EXPORT(ForwardItem);
HWY_EXPORT(BackwardDeltaItem);
HWY_EXPORT(BackwardKvItem);
HWY_EXPORT(BackwardQItem);
HWY_EXPORT(BackwardFusedItem);
HWY_EXPORT(DecodeItem);
HWY_EXPORT(DecodeCombine);
HWY_EXPORT(GetTiles);
HWY_EXPORT(Exp2Array);

namespace {

// Index of `target` in an HWY_EXPORT table (the same arithmetic as
// hwy::ChosenTarget::GetIndex, for one target; EMU128/SCALAR map to the fallback).
size_t TableIndex(int64_t target) {
  return hwy::Num0BitsBelowLS1Bit_Nonzero64(
      static_cast<uint64_t>(HWY_CHOSEN_TARGET_SHIFT(target) | HWY_CHOSEN_TARGET_MASK_SCALAR));
}

struct Named {
  const char* name;
  int64_t target;
};
// Best first. "scalar" is whichever portable target the build compiles: HWY_SCALAR
// (one lane; what Debian's Highway 1.0.3 with HWY_COMPILE_ALL_ATTAINABLE gives on
// x86-64) or EMU128.
constexpr Named kKnown[] = {{"avx512", HWY_AVX3},
                            {"avx2", HWY_AVX2},
                            {"sse4", HWY_SSE4},
                            {"scalar", (HWY_TARGETS & HWY_EMU128) ? HWY_EMU128 : HWY_SCALAR}};

// The targets that are the avx512 kernels plus a bf16 forward and backward of their own
// (not Highway targets), best first: what each lacks on this CPU ("" = runs here) and
// its items.
struct Bf16Target {
  const char* name;
  std::string (*missing)();
  ForwardItemFn (*item)();
  ItemFn (*backward_kv_item)();
  ItemFn (*backward_q_item)();
};
const Bf16Target kBf16Targets[] = {
    {"amx", &AmxMissing, &AmxForwardItem, &AmxBackwardKvItem, &AmxBackwardQItem},
    {"avx512bf16", &Avx512Bf16Missing, &Avx512Bf16ForwardItem, &Avx512Bf16BackwardKvItem,
     &Avx512Bf16BackwardQItem}};

std::vector<TargetKernels> Discover() {
  std::vector<TargetKernels> out;
  const int64_t supported = hwy::SupportedTargets();
  for (const Named& n : kKnown) {
    const bool is_scalar = std::strcmp(n.name, "scalar") == 0;
    if (!(HWY_TARGETS & n.target)) continue;              // not compiled
    if (!is_scalar && !(supported & n.target)) continue;  // CPU lacks it
    const size_t i = TableIndex(n.target);
    if (!HWY_DISPATCH_TABLE(ForwardItem)[i]) continue;
    out.push_back({n.name, n.target, HWY_DISPATCH_TABLE(GetTiles)[i](),
                   HWY_DISPATCH_TABLE(ForwardItem)[i], HWY_DISPATCH_TABLE(BackwardDeltaItem)[i],
                   HWY_DISPATCH_TABLE(BackwardKvItem)[i], HWY_DISPATCH_TABLE(BackwardQItem)[i],
                   HWY_DISPATCH_TABLE(DecodeItem)[i], HWY_DISPATCH_TABLE(DecodeCombine)[i],
                   HWY_DISPATCH_TABLE(Exp2Array)[i]});
    out.back().backward_fused_item = HWY_DISPATCH_TABLE(BackwardFusedItem)[i];
  }
  // amx (forward_amx.cpp, backward_amx.cpp) and avx512bf16 (forward_avx512bf16.cpp,
  // backward_avx512bf16.cpp): the avx512 kernels with a bf16 forward and backward in
  // front, where this CPU has AMX / AVX512_BF16.
  if (out.empty() || std::strcmp(out.front().name, "avx512") != 0) return out;
  const TargetKernels avx512 = out.front();
  size_t at = 0;
  for (const Bf16Target& b : kBf16Targets) {
    if (!b.missing().empty() || b.item() == nullptr) continue;
    TargetKernels t = avx512;
    t.name = b.name;
    t.bf16_forward_item = b.item();
    t.bf16_backward_kv_item = b.backward_kv_item();
    t.bf16_backward_q_item = b.backward_q_item();
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(at++), t);
  }
  return out;
}

}  // namespace

const std::vector<TargetKernels>& SupportedTargets() {
  static const std::vector<TargetKernels> targets = Discover();
  return targets;
}

std::string SupportedList() {
  std::string s;
  for (const TargetKernels& t : SupportedTargets())
    s += (s.empty() ? "" : ",") + std::string(t.name);
  return s;
}

std::string UnsupportedList() {
  std::string s;
  for (const Bf16Target& b : kBf16Targets) {
    const std::string missing = b.missing();
    if (!missing.empty())
      s += (s.empty() ? "" : ", ") + std::string(b.name) + " (needs " + missing + ")";
  }
  return s;
}

const TargetKernels& SelectTarget() {
  const std::vector<TargetKernels>& targets = SupportedTargets();
  const char* env = std::getenv("FLASH_CPU_TARGET");
  if (env == nullptr || *env == '\0') return targets.front();
  for (const TargetKernels& t : targets)
    if (std::strcmp(t.name, env) == 0) return t;
  bool known = false;
  std::string lacks;
  for (const Bf16Target& b : kBf16Targets)
    if (std::strcmp(env, b.name) == 0) {
      known = true;
      lacks = " (it lacks " + b.missing() + ")";
    }
  // A Highway target this CPU runs but the build left out (FLASHATTN_HWY_DISABLED_TARGETS).
  bool not_compiled = false;
  for (const Named& n : kKnown)
    if (std::strcmp(n.name, env) == 0) {
      known = true;
      not_compiled = !(HWY_TARGETS & n.target) && (hwy::SupportedTargets() & n.target);
    }
  const std::string why = !known         ? "not a known SIMD target"
                          : not_compiled ? "not compiled in this build (CMake "
                                           "FLASHATTN_HWY_DISABLED_TARGETS)"
                                         : "not supported by this CPU" + lacks;
  throw flash::Error(std::string("FLASH_CPU_TARGET='") + env + "' is " + why +
                     "; valid values here: " + SupportedList());
}

}  // namespace flash::cpu
#endif  // HWY_ONCE
