// FLASH_CPU_TARGET handling and the probe() detail format the cross-backend suite
// parses: "simd=<chosen>; supported=<comma list>; ...".
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cpu_test_util.h"

namespace flash::cpu::test {
namespace {

std::string Detail() {
  flash_message reason{}, detail{};
  EXPECT_EQ(flash_cpu_module()->probe(&reason, &detail), 1) << reason.text;
  return detail.text;
}

TEST(CpuTarget, ProbeDetailFormat) {
  unsetenv("FLASH_CPU_TARGET");
  const std::string d = Detail();
  ASSERT_EQ(d.rfind("simd=", 0), 0u) << d;
  const std::vector<std::string> names = SupportedTargetNames();
  ASSERT_FALSE(names.empty()) << d;
  EXPECT_EQ(d.substr(5, names[0].size() + 2), names[0] + "; ")
      << "best target is the default: " << d;
  EXPECT_EQ(names.back(), "scalar") << d;
  for (const std::string& n : names)
    EXPECT_TRUE(n == "amx" || n == "avx512bf16" || n == "avx512" || n == "avx2" || n == "sse4" ||
                n == "scalar")
        << n;
}

// The bf16-forward targets (amx, avx512bf16) are either supported or reported with what
// they need, each once, and the report parses: the cross-backend suite lists such
// targets as skips naming the missing feature.
TEST(CpuTarget, EveryBf16TargetIsSupportedOrReported) {
  const std::vector<std::string> names = SupportedTargetNames();
  const auto unsupported = UnsupportedTargets();
  for (const std::string target : {"amx", "avx512bf16"}) {
    const bool supported = std::find(names.begin(), names.end(), target) != names.end();
    int reported = 0;
    for (const auto& [name, needs] : unsupported) {
      if (name != target) continue;
      ++reported;
      EXPECT_EQ(needs.rfind("needs ", 0), 0u) << needs;
      EXPECT_GT(needs.size(), 6u) << needs;
    }
    EXPECT_EQ(reported, supported ? 0 : 1) << target << " in " << Detail();
  }
  for (const auto& [name, needs] : unsupported)
    EXPECT_TRUE(name == "amx" || name == "avx512bf16") << name << " " << needs;
}

TEST(CpuTarget, EachSupportedTargetCanBeForced) {
  for (const std::string& n : SupportedTargetNames()) {
    setenv("FLASH_CPU_TARGET", n.c_str(), 1);
    EXPECT_EQ(Detail().rfind("simd=" + n + ";", 0), 0u);
    Case c;
    // amx and avx512bf16 run the bf16 forward and backward themselves; f32 and f16 on
    // them run (and are named) avx512.
    const bool bf16_target = n == "amx" || n == "avx512bf16";
    if (bf16_target) c.dtype = FLASH_BF16;
    Problem pr(c);
    std::string err;
    EXPECT_EQ(pr.Forward(&err), FLASH_OK) << err;
    flash_message kernel{};
    ASSERT_EQ(flash_cpu_module()->choose(&pr.p, FLASH_FORWARD, &kernel), FLASH_OK);
    EXPECT_NE(std::string(kernel.text).find("." + n + "."), std::string::npos) << kernel.text;
    if (!bf16_target) continue;
    for (int32_t dtype : {FLASH_F32, FLASH_F16}) {
      pr.p.dtype = dtype;
      for (int direction : {FLASH_FORWARD, FLASH_BACKWARD}) {
        ASSERT_EQ(flash_cpu_module()->choose(&pr.p, direction, &kernel), FLASH_OK);
        EXPECT_NE(std::string(kernel.text).find(".avx512."), std::string::npos) << kernel.text;
      }
    }
    pr.p.dtype = FLASH_BF16;
    ASSERT_EQ(flash_cpu_module()->choose(&pr.p, FLASH_BACKWARD, &kernel), FLASH_OK);
    EXPECT_EQ(std::string(kernel.text).rfind("cpu.bwd." + n + ".bf16.", 0), 0u) << kernel.text;
  }
  unsetenv("FLASH_CPU_TARGET");
}

// Without a forced target, bf16 forwards take the best bf16 target the CPU has (amx,
// then avx512bf16); one it lacks is refused by name when forced, naming the feature.
TEST(CpuTarget, Bf16TargetIsDefaultOrRefusedByName) {
  for (const std::string target : {"amx", "avx512bf16"}) {
    unsetenv("FLASH_CPU_TARGET");
    const std::vector<std::string> names = SupportedTargetNames();
    Case c;
    c.dtype = FLASH_BF16;
    Problem pr(c);
    const std::string missing = MissingTarget(target);
    if (missing.empty()) {
      if (names.front() != target) continue;  // a better bf16 target is the default
      flash_message kernel{};
      ASSERT_EQ(flash_cpu_module()->choose(&pr.p, FLASH_FORWARD, &kernel), FLASH_OK);
      EXPECT_EQ(std::string(kernel.text).rfind("cpu.fwd." + target + ".bf16.d16", 0), 0u)
          << kernel.text;
      continue;
    }
    EXPECT_NE(Detail().find(target + " (needs "), std::string::npos) << Detail();
    setenv("FLASH_CPU_TARGET", target.c_str(), 1);
    std::string err;
    EXPECT_EQ(pr.Forward(&err), FLASH_INVALID_ARGUMENT);
    EXPECT_NE(err.find("not supported by this CPU (it lacks "), std::string::npos) << err;
    err.clear();
    EXPECT_EQ(pr.Backward(&err), FLASH_INVALID_ARGUMENT);  // the backward likewise
    EXPECT_NE(err.find("not supported by this CPU (it lacks "), std::string::npos) << err;
  }
  unsetenv("FLASH_CPU_TARGET");
}

TEST(CpuTarget, UnknownValueIsAnErrorListingValidOnes) {
  setenv("FLASH_CPU_TARGET", "avx1024", 1);
  Case c;
  Problem pr(c);
  std::string err;
  EXPECT_EQ(pr.Forward(&err), FLASH_INVALID_ARGUMENT);
  EXPECT_NE(err.find("FLASH_CPU_TARGET"), std::string::npos) << err;
  EXPECT_NE(err.find("avx1024"), std::string::npos) << err;
  EXPECT_NE(err.find("scalar"), std::string::npos) << err;
  EXPECT_EQ(pr.Backward(&err), FLASH_INVALID_ARGUMENT);
  // The hardware is fine, so the backend stays available; the detail shows the bad
  // value, and choose() reports it as an invalid argument (a configuration error, not
  // a problem the backend declines).
  flash_message reason{}, detail{};
  EXPECT_EQ(flash_cpu_module()->probe(&reason, &detail), 1);
  EXPECT_NE(std::string(detail.text).find("FLASH_CPU_TARGET"), std::string::npos) << detail.text;
  flash_message kernel{};
  EXPECT_EQ(flash_cpu_module()->choose(&pr.p, FLASH_FORWARD, &kernel), FLASH_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kernel.text).find("avx1024"), std::string::npos) << kernel.text;
  unsetenv("FLASH_CPU_TARGET");
}

TEST(CpuTarget, KnownButUnsupportedValueIsAnError) {
  const std::vector<std::string> names = SupportedTargetNames();
  for (const char* n : {"avx512", "avx2", "sse4"}) {
    bool supported = false;
    for (const auto& s : names) supported = supported || s == n;
    if (supported) continue;
    setenv("FLASH_CPU_TARGET", n, 1);
    Case c;
    Problem pr(c);
    std::string err;
    EXPECT_EQ(pr.Forward(&err), FLASH_INVALID_ARGUMENT) << n;
    EXPECT_NE(err.find("not supported by this CPU"), std::string::npos) << err;
    unsetenv("FLASH_CPU_TARGET");
    return;
  }
  GTEST_SKIP() << "every known target is supported here; nothing to refuse";
}

}  // namespace
}  // namespace flash::cpu::test
