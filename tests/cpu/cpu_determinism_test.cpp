// Backward (and forward) results are bitwise identical for 1, 2 and 3 OpenMP
// threads and across repeated runs: every output element is produced by one work
// item in a fixed order (backends/cpu/backward-inl.h).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "support/sanitized.hpp"

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

// The fused backward (one item per batch, kv head) gives bitwise the two passes' dq,
// dk, dv, so choose() may take it by thread count (FusedBackward in cpu_plan.h). Forced
// both ways with FLASH_CPU_BWD_FUSED over masks, windows, Sq != Sk, GQA, softcap,
// strides, dtypes, head-dim tails and NaN-free data spanning several K/V groups.
std::string BackwardKernel(const Problem& pr) {
  flash_message kernel{};
  EXPECT_EQ(flash_cpu_module()->choose(&pr.p, FLASH_BACKWARD, &kernel), FLASH_OK);
  return kernel.text;
}

Outputs RunBackward(const Case& c, const char* fused, std::string* kernel) {
  setenv("FLASH_CPU_BWD_FUSED", fused, 1);
  Problem pr(c, 13);
  EXPECT_EQ(pr.Forward(), FLASH_OK);
  EXPECT_EQ(pr.Backward(), FLASH_OK);
  *kernel = BackwardKernel(pr);
  unsetenv("FLASH_CPU_BWD_FUSED");
  return {pr.o.bytes, pr.dq.bytes, pr.dk.bytes, pr.dv.bytes, pr.lse};
}

TEST(CpuDeterminism, FusedBackwardBitwiseTwoPass) {
  const char* target = std::getenv("FLASH_CPU_TARGET");
  if (target && (std::string(target) == "amx" || std::string(target) == "avx512bf16"))
    GTEST_SKIP() << "f32 runs the avx512 kernels on " << target;
  std::vector<Case> cases;
  Case c;
  c.batch = 2;
  c.hq = 6;
  c.hk = 2;
  c.sq = 301;
  c.sk = 1000;  // 11 K/V tiles: 3 groups of up to 4
  c.d = 40;
  cases.push_back(c);
  c.causal = true;
  cases.push_back(c);
  c.sq = 500;  // Sq > Sk: causal rows before the diagonal see nothing
  c.sk = 230;
  cases.push_back(c);
  c.causal = false;
  c.wl = 70;  // windows: pass 2's first tile of a q block is partly masked
  c.wr = 5;
  c.sq = 400;
  c.sk = 650;
  cases.push_back(c);
  c.wl = 0;
  c.wr = 200;
  c.softcap = 7.0f;
  c.layout = 1;
  cases.push_back(c);
  c.wl = c.wr = -1;
  c.causal = true;
  c.layout = 2;
  c.d = 64;
  c.dv = 24;
  c.dtype = FLASH_F16;
  cases.push_back(c);
  c = Case();
  c.hq = c.hk = 3;
  // Under sanitizers (support/sanitized.hpp) 500: 6 K/V tiles, still 2 groups.
  c.sq = c.sk = flash::test::kSanitized ? 500 : 1024;
  c.d = 128;
  c.dtype = FLASH_F32;
  cases.push_back(c);
  for (const Case& cs : cases) {
    std::string fused_kernel, two_pass_kernel;
    const Outputs fused = RunBackward(cs, "1", &fused_kernel);
    const Outputs two_pass = RunBackward(cs, "0", &two_pass_kernel);
    EXPECT_NE(fused_kernel.find(".fused"), std::string::npos) << cs.Name() << " " << fused_kernel;
    EXPECT_EQ(two_pass_kernel.find(".fused"), std::string::npos) << two_pass_kernel;
    ExpectSame(fused, two_pass, cs.Name().c_str());
  }
}

// Without FLASH_CPU_BWD_FUSED the fused backward is taken where batch x kv heads items
// keep the threads busy (FusedBackward::Pays) and its dQ accumulator fits.
TEST(CpuDeterminism, FusedBackwardChoice) {
  const char* target = std::getenv("FLASH_CPU_TARGET");
  if (target && (std::string(target) == "amx" || std::string(target) == "avx512bf16"))
    GTEST_SKIP() << "f32 runs the avx512 kernels on " << target;
  unsetenv("FLASH_CPU_BWD_FUSED");
  const int saved = omp_get_max_threads();
  Case c;
  c.sq = c.sk = 1024;
  c.d = 128;
  struct Want {
    int64_t heads, sq;
    int threads;
    bool fused;
  };
  const Want wants[] = {
      {1, 1024, 1, true},     // one thread: 5 products beat 8 always
      {1, 1024, 2, false},    // 1 item on 2 threads: 5 vs 4
      {2, 1024, 2, true},     // 5 vs 8
      {3, 1024, 2, true},     // 2 rounds: 10 vs 12
      {17, 1024, 16, false},  // 10 vs 8.5
      {16, 1024, 16, true},   // the issue-17 shape
      {16, 4096, 16, true},   // dQ of 4096 x 128 floats: 2 MiB, fits
      {16, 4097, 16, false},  // over kMaxDqBytes
  };
  for (const Want& w : wants) {
    c.hq = c.hk = w.heads;
    c.sq = c.sk = w.sq;
    omp_set_num_threads(w.threads);
    Problem pr(c, 1);
    const std::string kernel = BackwardKernel(pr);
    EXPECT_EQ(kernel.find(".fused") != std::string::npos, w.fused)
        << "H=" << w.heads << " S=" << w.sq << " threads=" << w.threads << ": " << kernel;
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
