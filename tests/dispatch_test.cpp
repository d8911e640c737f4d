// Backend selection: FLASH_BACKEND, desc.backend, unavailable and unknown backends,
// FLASH_LOG output. Never a silent fallback.
#include <gtest/gtest.h>

#include "dispatch/env_switch.hpp"
#include "support/cases.hpp"
#include "support/targets.hpp"

namespace flash::test {
namespace {

struct Small {
  AttentionDesc desc;
  HostTensor q, k, v, o;
  Small() {
    desc.seqlen_q = 3;
    desc.seqlen_kv = 5;
    desc.head_dim = 8;
    q = HostTensor(DType::f32, 1, 3, 1, 8, Layout::packed);
    k = HostTensor(DType::f32, 1, 5, 1, 8, Layout::packed);
    v = k;
    o = q;
    std::mt19937_64 rng(7);
    q.fill_random(rng, 1);
    k.fill_random(rng, 1);
    v.fill_random(rng, 1);
  }
  void run() { attention(desc, q.data(), k.data(), v.data(), o.data()); }
};

const BackendInfo& info(Backend b) {
  static const std::vector<BackendInfo> all = backends();
  for (const BackendInfo& i : all)
    if (i.backend == b) return i;
  throw std::logic_error("backend missing from backends()");
}

std::string error_of(Small& s) {
  try {
    s.run();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Dispatch, BackendsListsEveryBackendWithAReasonWhenUnavailable) {
  const auto all = backends();
  ASSERT_EQ(all.size(), 4u);
  for (const BackendInfo& b : all) {
    if (!b.available) EXPECT_FALSE(b.reason.empty()) << to_string(b.backend);
  }
  EXPECT_TRUE(info(Backend::reference).available);
}

TEST(Dispatch, UnknownEnvValueListsTheValidOnes) {
  ScopedEnv env("FLASH_BACKEND", "bogus");
  Small s;
  const std::string message = error_of(s);
  EXPECT_NE(message.find("bogus"), std::string::npos) << message;
  EXPECT_NE(message.find("reference, cpu, cuda, hip"), std::string::npos) << message;
}

TEST(Dispatch, EnvSelectsTheReference) {
  ScopedEnv env("FLASH_BACKEND", "reference");
  ScopedEnv log("FLASH_LOG", "1");
  Small s;
  testing::internal::CaptureStderr();
  s.run();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("forward on reference"), std::string::npos) << err;
  EXPECT_NE(err.find("FLASH_BACKEND=reference"), std::string::npos) << err;
  // Every other backend is accounted for in the log line.
  for (const char* other : {"cpu:", "cuda:", "hip:"})
    EXPECT_NE(err.find(other), std::string::npos) << err;
}

TEST(Dispatch, DescBackendOverridesTheEnvironment) {
  ScopedEnv env("FLASH_BACKEND", "bogus-but-ignored");
  Small s;
  s.desc.backend = Backend::reference;
  EXPECT_NO_THROW(s.run());
}

TEST(Dispatch, AnUnavailableRequestedBackendIsAnErrorNamingIt) {
  for (Backend b : {Backend::cpu, Backend::cuda, Backend::hip}) {
    const BackendInfo& i = info(b);
    if (i.available) continue;
    for (const bool by_env : {true, false}) {
      ScopedEnv env("FLASH_BACKEND", by_env ? to_string(b) : nullptr);
      Small s;
      if (!by_env) s.desc.backend = b;
      const std::string message = error_of(s);
      EXPECT_NE(
          message.find(std::string(by_env ? "FLASH_BACKEND=" : "desc.backend=") + to_string(b)),
          std::string::npos)
          << message;
      EXPECT_NE(message.find(i.reason), std::string::npos) << message;
    }
  }
}

TEST(Dispatch, CudaUnavailableMessageMentionsCuda) {
  const BackendInfo& cuda = info(Backend::cuda);
  if (cuda.available) GTEST_SKIP() << "a CUDA device is present: " << cuda.detail;
  ScopedEnv env("FLASH_BACKEND", "cuda");
  Small s;
  const std::string message = error_of(s);
  EXPECT_NE(message.find("cuda"), std::string::npos) << message;
}

TEST(Dispatch, AutomaticOnHostMemoryPicksCpuOrReference) {
  ScopedEnv env("FLASH_BACKEND", nullptr);
  ScopedEnv log("FLASH_LOG", "1");
  Small s;
  testing::internal::CaptureStderr();
  s.run();
  const std::string err = testing::internal::GetCapturedStderr();
  const char* expected = info(Backend::cpu).available ? "forward on cpu" : "forward on reference";
  EXPECT_NE(err.find(expected), std::string::npos) << err;
  EXPECT_NE(err.find("q is host memory"), std::string::npos) << err;
}

TEST(Dispatch, LogIsSilentByDefault) {
  ScopedEnv log("FLASH_LOG", nullptr);
  Small s;
  s.desc.backend = Backend::reference;
  testing::internal::CaptureStderr();
  s.run();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace flash::test

namespace flash::test {
namespace {

TEST(Explain, ReportsTheBackendAndKernelWithoutRunning) {
  AttentionDesc d;
  d.seqlen_q = 5;
  d.seqlen_kv = 7;
  d.head_dim = 16;
  d.backend = Backend::reference;
  const Plan plan = explain(d);
  EXPECT_EQ(plan.backend, Backend::reference);
  EXPECT_FALSE(plan.kernel.empty());
  EXPECT_NE(plan.reason.find("desc.backend=reference"), std::string::npos) << plan.reason;
  d.head_dim = 0;
  EXPECT_THROW(explain(d), Error);
}

// The backends' A/B knobs (FLASH_CUDA_FWD_BLOCKS, FLASH_CPU_MIN_ITEMS, FLASH_CUDA_FWD=...):
// unset or empty is the default; any value outside the allowed ones is an Error naming the
// variable and the value, never a silent default (README: "A/B and tuning switches").
TEST(EnvKnobs, ValuesOutsideTheAllowedOnesAreErrors) {
  const char* name = "FLASH_TEST_KNOB";
  {
    ScopedEnv unset(name, nullptr);
    EXPECT_EQ(detail::env_positive_int(name), 0);
    EXPECT_EQ(detail::env_switch(name, {"0", "1"}), "");
  }
  {
    ScopedEnv empty(name, "");
    EXPECT_EQ(detail::env_positive_int(name), 0);
  }
  {
    ScopedEnv two(name, "2");
    EXPECT_EQ(detail::env_positive_int(name), 2);
    EXPECT_THROW(detail::env_switch(name, {"0", "1"}), Error);
  }
  for (const char* bad : {"0", "-3", "0x10", " 4", "12a", "1234567890"}) {
    ScopedEnv env(name, bad);
    try {
      detail::env_positive_int(name);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(name), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace flash::test
