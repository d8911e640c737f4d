// Backward (and forward) results are bitwise identical for 1, 2 and 3 OpenMP
// threads and across repeated runs: every output element is produced by one work
// item in a fixed order (backends/cpu/backward-inl.h).
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "cpu_test_util.h"

namespace flash::cpu::test {
namespace {

struct Outputs {
  std::vector<uint8_t> o, dq, dk, dv;
  std::vector<float> lse;
};

Outputs RunWithThreads(const Case& c, int threads) {
  omp_set_num_threads(threads);
  Problem pr(c, 11);
  EXPECT_EQ(pr.Forward(), FLASH_OK);
  EXPECT_EQ(pr.Backward(), FLASH_OK);
  return {pr.o.bytes, pr.dq.bytes, pr.dk.bytes, pr.dv.bytes, pr.lse};
}

void ExpectSame(const Outputs& a, const Outputs& b, const char* what) {
  EXPECT_TRUE(a.o == b.o) << what << ": o differs";
  EXPECT_TRUE(a.dq == b.dq) << what << ": dq differs";
  EXPECT_TRUE(a.dk == b.dk) << what << ": dk differs";
  EXPECT_TRUE(a.dv == b.dv) << what << ": dv differs";
  EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4))
      << what << ": lse differs";
}

TEST(CpuDeterminism, BitwiseEqualAcrossThreadCounts) {
  std::vector<Case> cases;
  Case c;  // GQA group of 3, causal, several q and kv blocks per head
  c.batch = 2;
  c.hq = 6;
  c.hk = 2;
  c.sq = 301;
  c.sk = 277;
  c.d = 40;
  c.causal = true;
  cases.push_back(c);
  c.causal = false;
  c.softcap = 10.0f;
  c.dtype = FLASH_BF16;
  cases.push_back(c);
  // 8 forward items (4 q blocks x 2 heads): head-major on 1 thread, cost-major on 2 and
  // 3 (fewer than 8 per thread, Plan::OrderForThreads); the order must not matter.
  c.batch = 1;
  c.hq = c.hk = 2;
  c.causal = true;
  c.dtype = FLASH_F32;
  cases.push_back(c);
  const int saved = omp_get_max_threads();
  for (const Case& cs : cases) {
    const Outputs one = RunWithThreads(cs, 1);
    ExpectSame(one, RunWithThreads(cs, 2), "2 threads");
    ExpectSame(one, RunWithThreads(cs, 3), "3 threads");
    ExpectSame(one, RunWithThreads(cs, 1), "repeat with 1 thread");
  }
  omp_set_num_threads(saved);
}

// A caller already inside an OpenMP parallel region gets a single-threaded call
// (no nested team) with the same results.
TEST(CpuDeterminism, CallFromInsideParallelRegion) {
  Case c;
  c.hq = c.hk = 2;
  c.sq = c.sk = 150;
  c.d = 32;
  const Outputs ref = RunWithThreads(c, 2);
  std::vector<Outputs> got(2);
#pragma omp parallel num_threads(2)
  {
    Problem pr(c, 11);
    pr.Forward();
    pr.Backward();
    got[omp_get_thread_num()] = {pr.o.bytes, pr.dq.bytes, pr.dk.bytes, pr.dv.bytes, pr.lse};
  }
  ExpectSame(ref, got[0], "nested, thread 0");
  ExpectSame(ref, got[1], "nested, thread 1");
}

}  // namespace
}  // namespace flash::cpu::test
