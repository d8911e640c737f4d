// The decode path (backends/cpu/decode-inl.h): chosen for few query rows per kv head
// against long caches, checked against the fp64 oracle on every SIMD target, with key
// splits (several chunks per head, combined), masks aligned bottom-right, softcap, lse,
// NaN in K/V rows no row sees, and bitwise-equal results for any
// thread count. Packed, cache-length and paged calls run in tests/inference_test.cpp.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_test_util.h"
#include "reference/reference.hpp"

namespace flash::cpu::test {
namespace {

std::string Kernel(const Case& c) {
  Problem pr(c);
  flash_message kernel{};
  EXPECT_EQ(flash_cpu_module()->choose(&pr.p, FLASH_FORWARD, &kernel), FLASH_OK);
  return kernel.text;
}

// o and lse against the oracle; same tolerances as cpu_kernel_test.
void CheckForward(const Case& c, uint32_t seed = 3, Problem* given = nullptr) {
  Problem own(c, seed);
  Problem& pr = given ? *given : own;
  const flash_problem& p = pr.p;
  std::string err;
  ASSERT_EQ(pr.Forward(&err), FLASH_OK) << err;
  const reference::ForwardResult ref = reference::forward(p, pr.q.data(), pr.k.data(), pr.v.data());
  const double tol = c.dtype == FLASH_F32 ? 2e-5 : c.dtype == FLASH_F16 ? 2e-3 : 1.6e-2;
  double o_err = 0, o_max = 1, lse_err = 0;
  bool finite = true;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t s = 0; s < c.sq; ++s)
      for (int64_t h = 0; h < c.hq; ++h) {
        for (int64_t d = 0; d < p.head_dim_v; ++d) {
          const double got = Problem::At(pr.o, p.o_stride, b, s, h, d);
          const double want = ref.o[((b * c.sq + s) * c.hq + h) * p.head_dim_v + d];
          finite = finite && std::isfinite(got);
          o_err = std::max(o_err, std::fabs(got - want));
          o_max = std::max(o_max, std::fabs(want));
        }
        const double lr = ref.lse[(b * c.hq + h) * c.sq + s];
        const double lg = pr.lse[(b * c.hq + h) * c.sq + s];
        if (std::isinf(lr))
          EXPECT_TRUE(std::isinf(lg) && lg < 0) << c.Name() << " lse row " << s << " = " << lg;
        else
          lse_err = std::max(lse_err, std::fabs(lg - lr));
      }
  EXPECT_TRUE(finite) << c.Name();
  EXPECT_LE(o_err, tol * o_max) << c.Name();
  EXPECT_LE(lse_err, 1e-4) << c.Name();
}

std::vector<Case> DecodeCases() {
  std::vector<Case> cases;
  Case c;
  c.hq = 8;  // GQA 4:1, one token: 4 rows per kv head
  c.hk = 2;
  c.d = 128;
  c.sq = 1;
  c.causal = true;
  for (int64_t sk : {64, 1000, 5000}) {  // 5000 keys: dozens of chunks per head
    c.sk = sk;
    for (int32_t dt : {FLASH_F32, FLASH_BF16, FLASH_F16}) {
      c.dtype = dt;
      cases.push_back(c);
    }
  }
  // 3 and 2 rows per kv head: Q·K reduces 12 dot products padded to 16 lanes, and 8
  // (then folded within pairs of lanes); 1001 keys end a block mid-step.
  for (int64_t hq : {6, 4}) {
    c.hq = hq;
    c.sk = 1001;
    for (int32_t dt : {FLASH_F32, FLASH_BF16}) {
      c.dtype = dt;
      cases.push_back(c);
    }
  }
  c.hq = 8;
  c.dtype = FLASH_F32;
  c.sk = 3001;
  c.sq = 4;  // speculative decoding: 16 rows per kv head, causal tail inside the last block
  cases.push_back(c);
  c.sq = 3;
  c.hq = 6;  // group of 3, 9 rows: row groups of 4 + 4 + 1
  c.causal = false;
  c.softcap = 5.0f;
  c.batch = 2;
  c.layout = 2;  // padded rows: heads not packed
  cases.push_back(c);
  c.softcap = 0;
  c.layout = 1;  // [b, h, s, d]
  c.wl = 700;    // window: chunks outside it are empty, rows see different key ranges
  c.wr = 0;
  c.dtype = FLASH_BF16;
  cases.push_back(c);
  c.layout = 0;
  c.wl = c.wr = -1;
  c.causal = true;
  c.sq = 16;  // MHA, 16 tokens: 16 rows per kv head
  c.hq = c.hk = 3;
  c.d = 64;
  c.dv = 32;
  c.sk = 2000;
  cases.push_back(c);
  c.sq = 5;  // one key per row (window 0, 0); empty rows need seqlens_kv (inference_test)
  c.sk = 66;
  c.causal = false;
  c.wl = c.wr = 0;
  c.dv = 0;
  cases.push_back(c);
  return cases;
}

TEST(CpuDecode, ChosenForFewRowsPerKvHead) {
  Case c;
  c.hq = 32;
  c.hk = 8;
  c.d = 128;
  c.sq = 1;
  c.sk = 8192;
  EXPECT_EQ(Kernel(c).rfind("cpu.decode.", 0), 0u) << Kernel(c);
  c.sq = 5;  // 20 rows per kv head: the prefill tiles
  EXPECT_EQ(Kernel(c).rfind("cpu.fwd.", 0), 0u) << Kernel(c);
  c.sq = 1;
  c.sk = 10;  // too few keys to split
  EXPECT_EQ(Kernel(c).rfind("cpu.fwd.", 0), 0u) << Kernel(c);
}

TEST(CpuDecode, MatchesOracleOnEveryTarget) {
  for (const std::string& target : SupportedTargetNames()) {
    setenv("FLASH_CPU_TARGET", target.c_str(), 1);
    SCOPED_TRACE(target);
    for (const Case& c : DecodeCases()) {
      ASSERT_EQ(Kernel(c).rfind("cpu.decode.", 0), 0u) << c.Name() << ": " << Kernel(c);
      CheckForward(c);
    }
  }
  unsetenv("FLASH_CPU_TARGET");
}

// NaN/inf in K and V rows of keys no row sees (outside a window, beyond the causal
// diagonal) never reach any row: masked keys are skipped, not multiplied by 0.
TEST(CpuDecode, MaskedNonFiniteKeysReachNoRow) {
  for (const std::string& target : SupportedTargetNames()) {
    setenv("FLASH_CPU_TARGET", target.c_str(), 1);
    SCOPED_TRACE(target);
    for (int32_t dt : {FLASH_F32, FLASH_BF16}) {
      Case c;
      c.hq = 8;
      c.hk = 2;
      c.d = 64;
      c.sq = 3;
      c.sk = 3000;
      c.causal = true;
      c.wl = 900;
      c.wr = 0;
      c.dtype = dt;
      Problem pr(c, 5);
      // Keys 0 .. lo(0)-1 lie left of every row's window.
      const int64_t first_seen = c.sk - c.sq - c.wl;
      for (int64_t j = 0; j < first_seen; ++j)
        for (int64_t h = 0; h < c.hk; ++h)
          for (int64_t d = 0; d < c.d; ++d) {
            pr.v.Set(j * pr.p.v_stride[1] + h * pr.p.v_stride[2] + d, NAN);
            pr.k.Set(j * pr.p.k_stride[1] + h * pr.p.k_stride[2] + d, INFINITY);
          }
      ASSERT_EQ(pr.Forward(), FLASH_OK);
      for (int64_t i = 0; i < c.sq; ++i)
        for (int64_t h = 0; h < c.hq; ++h)
          for (int64_t d = 0; d < c.d; ++d)
            ASSERT_TRUE(std::isfinite(Problem::At(pr.o, pr.p.o_stride, 0, i, h, d))) << i;
    }
  }
  unsetenv("FLASH_CPU_TARGET");
}

// Chunks are fixed by the problem, never by the thread count: bitwise equal results.
TEST(CpuDecode, BitwiseEqualAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  for (int32_t dt : {FLASH_F32, FLASH_BF16}) {
    Case c;
    c.batch = 2;
    c.hq = 8;
    c.hk = 2;
    c.d = 64;
    c.sq = 2;
    c.sk = 20000;
    c.causal = true;
    c.dtype = dt;
    std::vector<uint8_t> o1;
    std::vector<float> lse1;
    for (int threads : {1, 2, 3, 1}) {
      omp_set_num_threads(threads);
      Problem pr(c, 9);
      ASSERT_EQ(pr.Forward(), FLASH_OK);
      if (o1.empty()) {
        o1 = pr.o.bytes;
        lse1 = pr.lse;
        continue;
      }
      EXPECT_TRUE(pr.o.bytes == o1) << threads << " threads: o differs";
      EXPECT_EQ(0, std::memcmp(pr.lse.data(), lse1.data(), lse1.size() * 4))
          << threads << " threads: lse differs";
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace flash::cpu::test
