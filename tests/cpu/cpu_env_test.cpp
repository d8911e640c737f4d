// The cpu backend's switch environment variables (dispatch/env_switch.hpp): a value
// outside the allowed set fails the call with a message naming the variable and the
// value (an A/B run with a typo must not silently measure the default), and every allowed
// value runs. Each is read on every call, so the tests switch them with setenv.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cpu_test_util.h"

namespace flash::cpu::test {
namespace {

enum class Call { forward, backward };

struct Knob {
  const char* name;
  Call call;
  Case problem;
  std::vector<const char*> allowed;
};

Case Shape(int64_t hq, int64_t hk, int64_t d, int64_t sq, int64_t sk, bool causal) {
  Case c;
  c.hq = hq;
  c.hk = hk;
  c.d = d;
  c.sq = sq;
  c.sk = sk;
  c.causal = causal;
  return c;
}
// One query token, GQA 4:1, long enough for key chunks: the decode path.
Case Decode() { return Shape(8, 2, 64, 1, 3000, false); }
// Several query blocks per head: the item planner and cost order.
Case Prefill() { return Shape(2, 2, 32, 300, 300, true); }

std::vector<Knob> Knobs() {
  return {{"FLASH_CPU_DECODE_PREFETCH", Call::forward, Decode(), {"l1", "l2", "none"}},
          {"FLASH_CPU_BWD_FUSED", Call::backward, Prefill(), {"0", "1"}},
          {"FLASH_CPU_COST_ORDER", Call::forward, Prefill(), {"0", "1"}},
          {"FLASH_CPU_MIN_ITEMS", Call::forward, Prefill(), {"1", "64"}}};
}

void PrintTo(const Knob& k, std::ostream* os) { *os << k.name; }

int RunCall(Call call, const Case& c, std::string* error) {
  Problem pr(c);
  return call == Call::forward ? pr.Forward(error) : pr.Backward(error);
}

class CpuEnvSwitch : public ::testing::TestWithParam<Knob> {
 protected:
  void TearDown() override { unsetenv(GetParam().name); }
};

// On every path, also where the knob does not apply (a decode forward for the backward's
// knob, ...): the value is checked before any work.
TEST_P(CpuEnvSwitch, UnknownValueIsAnErrorNamingIt) {
  const Knob& k = GetParam();
  const std::vector<std::pair<Call, Case>> paths = {
      {Call::forward, Decode()}, {Call::forward, Prefill()}, {Call::backward, Prefill()}};
  for (const char* bad : {"bogus", "2x", "-1", " 1", "+1"}) {
    setenv(k.name, bad, 1);
    for (const auto& [call, problem] : paths) {
      std::string error;
      EXPECT_NE(RunCall(call, problem, &error), FLASH_OK) << k.name << "=" << bad << " ran";
      EXPECT_NE(error.find(k.name), std::string::npos) << error;
      EXPECT_NE(error.find(std::string("'") + bad + "'"), std::string::npos) << error;
      EXPECT_NE(error.find("allowed"), std::string::npos) << error;
    }
    Problem pr(k.problem);  // choose() raises it too
    flash_message reason{};
    EXPECT_EQ(flash_cpu_module()->choose(&pr.p, FLASH_FORWARD, &reason), FLASH_INVALID_ARGUMENT)
        << reason.text;
    EXPECT_NE(std::string(reason.text).find(k.name), std::string::npos) << reason.text;
  }
}

TEST_P(CpuEnvSwitch, AllowedValuesAndUnsetRun) {
  const Knob& k = GetParam();
  for (const char* good : k.allowed) {
    setenv(k.name, good, 1);
    std::string error;
    EXPECT_EQ(RunCall(k.call, k.problem, &error), FLASH_OK)
        << k.name << "=" << good << ": " << error;
  }
  unsetenv(k.name);
  std::string error;
  EXPECT_EQ(RunCall(k.call, k.problem, &error), FLASH_OK) << error;
  setenv(k.name, "", 1);  // empty counts as unset
  EXPECT_EQ(RunCall(k.call, k.problem, &error), FLASH_OK) << error;
}

INSTANTIATE_TEST_SUITE_P(Knobs, CpuEnvSwitch, ::testing::ValuesIn(Knobs()),
                         [](const ::testing::TestParamInfo<Knob>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace flash::cpu::test
