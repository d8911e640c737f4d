// The bf16 forwards of their own targets — avx512bf16 (forward_avx512bf16.cpp,
// vdpbf16ps) and amx (forward_amx.cpp, tdpbf16ps tiles) — against the fp64 oracle under
// the project's tolerance rule: max error <= 2x that of naive attention evaluated in
// bf16 (reference::naive_forward) + 1e-3 x max |ref|. Odd sizes, Sq != Sk both ways,
// causal / windows / softcap / GQA / Dv != D / odd head_dim / strides, outputs poisoned
// with NaN, NaN and inf in key rows some rows do not see (on both halves of a bf16 key
// pair), and bitwise equal results for 1, 2 and 3 threads; the same for the bf16
// backwards (backward_avx512bf16.cpp on vdpbf16ps, backward_amx.cpp on tiles: dq, dk,
// dv under the same rule, eps relative to the largest gradient). Every check first asserts
// that choose() names the expected kernel, so none can pass on another path.
// On CPUs without a target's feature its tests are skipped naming what is missing.
// Built twice: flash_cpu_bf16_kernel_test (both targets, real instructions) and
// flash_cpu_amx_emulated_test (FLASH_BF16_TEST_AMX_ONLY: the amx target with its tile
// instructions emulated in scalar C++, backends/cpu/amx_emulate.h).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "reference/naive.hpp"
#include "reference/reference.hpp"

namespace flash::cpu::test {
namespace {

class CpuBf16Kernel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string missing = MissingTarget(GetParam());
    if (!missing.empty()) GTEST_SKIP() << GetParam() << " unavailable: " << missing;
    setenv("FLASH_CPU_TARGET", GetParam().c_str(), 1);
  }
  void TearDown() override { unsetenv("FLASH_CPU_TARGET"); }
};

// The target's bf16 forward runs p; decode-shaped problems (one query row against >= 64
// keys) run the decode kernel of the avx512 target instead, which choose() names.
void ExpectBf16Kernel(const flash_problem& p, bool decode_shape = false) {
  flash_message kernel{};
  ASSERT_EQ(flash_cpu_module()->choose(&p, FLASH_FORWARD, &kernel), FLASH_OK);
  const std::string want =
      decode_shape ? "cpu.decode.avx512.bf16.d"
                   : "cpu.fwd." + std::string(std::getenv("FLASH_CPU_TARGET")) + ".bf16.d";
  ASSERT_EQ(std::string(kernel.text).rfind(want, 0), 0u) << kernel.text;
}

// got (o of the problem, widened) and lse against ref, under the 2x-naive rule.
void CheckCase(const Case& c, bool decode_shape = false) {
  Problem pr(c, 5);  // o poisoned with NaN, lse with NaN
  const flash_problem& p = pr.p;
  ExpectBf16Kernel(p, decode_shape);
  std::string err;
  ASSERT_EQ(pr.Forward(&err), FLASH_OK) << err;
  const reference::ForwardResult ref = reference::forward(p, pr.q.data(), pr.k.data(), pr.v.data());
  const reference::ForwardResult naive =
      reference::naive_forward(p, pr.q.data(), pr.k.data(), pr.v.data());
  const int64_t Dv = p.head_dim_v;
  double err_o = 0, err_naive = 0, mag = 0;
  bool finite = true;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t s = 0; s < c.sq; ++s)
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t d = 0; d < Dv; ++d) {
          const size_t i = static_cast<size_t>(((b * c.sq + s) * c.hq + h) * Dv + d);
          const double got = Problem::At(pr.o, p.o_stride, b, s, h, d);
          finite = finite && std::isfinite(got);
          err_o = std::max(err_o, std::fabs(got - ref.o[i]));
          err_naive = std::max(err_naive, std::fabs(naive.o[i] - ref.o[i]));
          mag = std::max(mag, std::fabs(ref.o[i]));
        }
  const double bound = 2 * err_naive + 1e-3 * mag;
  EXPECT_TRUE(finite) << c.Name() << ": a NaN/inf reached o";
  EXPECT_LE(err_o, bound) << c.Name() << " o error " << err_o << " vs 2x naive " << err_naive;
  // lse: f32 accumulation of the bf16-exact scores; rows without keys are -inf.
  double err_l = 0, err_naive_l = 0, mag_l = 0;
  for (size_t i = 0; i < ref.lse.size(); ++i) {
    if (std::isinf(ref.lse[i])) {
      EXPECT_TRUE(std::isinf(pr.lse[i]) && pr.lse[i] < 0) << c.Name() << " lse " << i;
      continue;
    }
    EXPECT_TRUE(std::isfinite(pr.lse[i])) << c.Name() << " lse " << i;
    err_l = std::max(err_l, std::fabs(pr.lse[i] - ref.lse[i]));
    err_naive_l = std::max(err_naive_l, std::fabs(naive.lse[i] - ref.lse[i]));
    mag_l = std::max(mag_l, std::fabs(ref.lse[i]));
  }
  EXPECT_LE(err_l, 2 * err_naive_l + 1e-6 * std::max(1.0, mag_l))
      << c.Name() << " lse error " << err_l << " vs 2x naive " << err_naive_l;
}

// The bf16 backward names the target's own kernel (vdpbf16ps on avx512bf16, tiles on amx).
void ExpectBf16Backward(const flash_problem& p) {
  flash_message kernel{};
  ASSERT_EQ(flash_cpu_module()->choose(&p, FLASH_BACKWARD, &kernel), FLASH_OK);
  const std::string want = "cpu.bwd." + std::string(std::getenv("FLASH_CPU_TARGET")) + ".bf16.d";
  ASSERT_EQ(std::string(kernel.text).rfind(want, 0), 0u) << kernel.text;
}

// Max |got - ref| and |naive - ref| of one gradient (packed [b, s, h, d] in ref/naive,
// strided in got); false when a value of got is not finite.
struct GradError {
  double err = 0, naive = 0, mag = 0;
  bool finite = true;
  void Add(double got, double ref, double naive_value) {
    finite = finite && std::isfinite(got);
    err = std::max(err, std::fabs(got - ref));
    naive = std::max(naive, std::fabs(naive_value - ref));
    mag = std::max(mag, std::fabs(ref));
  }
};

// dq, dk and dv of the forward's own o and lse against the fp64 oracle under the
// 2x-naive-bf16 rule, eps relative to the largest gradient (as the cross-backend suite).
void CheckBackward(const Case& c) {
  Problem pr(c, 9);
  const flash_problem& p = pr.p;
  ExpectBf16Backward(p);
  std::string err;
  ASSERT_EQ(pr.Forward(&err), FLASH_OK) << err;
  ASSERT_EQ(pr.Backward(&err), FLASH_OK) << err;
  const reference::BackwardResult ref =
      reference::backward(p, pr.q.data(), pr.k.data(), pr.v.data(), pr.dout.data());
  const reference::BackwardResult naive =
      reference::naive_backward(p, pr.q.data(), pr.k.data(), pr.v.data(), pr.dout.data());
  GradError eq, ek, ev;
  const int64_t D = p.head_dim, Dv = p.head_dim_v;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t s = 0; s < c.sq; ++s)
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const size_t i = static_cast<size_t>(((b * c.sq + s) * c.hq + h) * D + d);
          eq.Add(Problem::At(pr.dq, p.q_stride, b, s, h, d), ref.dq[i], naive.dq[i]);
        }
    for (int64_t s = 0; s < c.sk; ++s)
      for (int64_t h = 0; h < c.hk; ++h) {
        for (int64_t d = 0; d < D; ++d) {
          const size_t i = static_cast<size_t>(((b * c.sk + s) * c.hk + h) * D + d);
          ek.Add(Problem::At(pr.dk, p.k_stride, b, s, h, d), ref.dk[i], naive.dk[i]);
        }
        for (int64_t d = 0; d < Dv; ++d) {
          const size_t i = static_cast<size_t>(((b * c.sk + s) * c.hk + h) * Dv + d);
          ev.Add(Problem::At(pr.dv, p.v_stride, b, s, h, d), ref.dv[i], naive.dv[i]);
        }
      }
  }
  const double scale = std::max({eq.mag, ek.mag, ev.mag});
  for (const auto& [name, e] :
       {std::pair<const char*, GradError>{"dq", eq}, {"dk", ek}, {"dv", ev}}) {
    EXPECT_TRUE(e.finite) << c.Name() << ": a NaN/inf reached " << name;
    EXPECT_LE(e.err, 2 * e.naive + 1e-3 * scale)
        << c.Name() << " " << name << " error " << e.err << " vs 2x naive " << e.naive;
  }
}

Case Bf16(int64_t sq, int64_t sk, int64_t d) {
  Case c;
  c.dtype = FLASH_BF16;
  c.sq = sq;
  c.sk = sk;
  c.d = d;
  return c;
}

TEST_P(CpuBf16Kernel, OddSizesBothWays) {
  const int64_t sizes[] = {1, 17, 113, 257, 1000};
  for (int64_t sq : sizes)
    for (int64_t sk : sizes) {
      if (sq * sk > 257 * 1000) continue;  // 1000 x 1000 runs in MasksOnLargeProblem
      CheckCase(Bf16(sq, sk, 64), sq == 1 && sk >= 64);
    }
}

TEST_P(CpuBf16Kernel, HeadDims) {
  // Odd head_dim (a zero half pair), dims below one vector, Dv != D both ways, and
  // Dv that leaves partial V panels (1..3 vectors of 16).
  for (int64_t d : {1, 7, 17, 33, 96, 128, 256}) CheckCase(Bf16(113, 257, d));
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{40, 72}, {128, 64}, {64, 200}, {3, 1}}) {
    Case c = Bf16(257, 113, d);
    c.dv = dv;
    CheckCase(c);
  }
}

TEST_P(CpuBf16Kernel, MasksSoftcapGqaStrides) {
  for (bool causal : {false, true})
    for (auto [wl, wr] : {std::pair<int64_t, int64_t>{-1, -1}, {33, 5}, {0, 0}, {-1, 0}, {4, -1}})
      for (auto [sq, sk] : {std::pair<int64_t, int64_t>{113, 257}, {257, 113}, {17, 1000}}) {
        Case c = Bf16(sq, sk, 72);
        c.causal = causal;
        c.wl = wl;
        c.wr = wr;
        CheckCase(c);
      }
  Case c = Bf16(257, 1000, 128);  // GQA group 3, softcap, [b, h, s, d] strides
  c.batch = 2;
  c.hq = 6;
  c.hk = 2;
  c.softcap = 20.0f;
  c.layout = 1;
  CheckCase(c);
  c.causal = true;
  c.layout = 2;  // padded rows: odd element strides
  c.hq = 4;
  c.hk = 1;
  c.softcap = 0.0f;
  CheckCase(c);
  c = Bf16(300, 60, 32);  // windows: many rows see no key (o = 0, lse = -inf)
  c.wl = 3;
  c.wr = 1;
  CheckCase(c);
}

TEST_P(CpuBf16Kernel, MasksOnLargeProblem) {
  Case c = Bf16(1000, 1000, 128);
  c.hq = 2;
  c.hk = 1;
  c.causal = true;
  CheckCase(c);
  c.causal = false;
  c.wl = 100;
  c.wr = 17;
  CheckCase(c);
}

// NaN in V and inf in K at an even and at an odd key: a row that does not see such a
// key (causal above it, a window past it) must stay finite and correct, whatever its
// pair partner; every row that sees the NaN value is NaN.
TEST_P(CpuBf16Kernel, NanReachesOnlyRowsThatUseIt) {
  for (const int64_t bad : {70, 71}) {
    for (const int64_t wl : {int64_t{-1}, int64_t{5}}) {
      Case c = Bf16(150, 150, 32);
      c.causal = true;
      c.wl = wl;
      Problem pr(c);
      for (int64_t d = 0; d < c.d; ++d)
        pr.v.Set(static_cast<size_t>(bad * pr.p.v_stride[1] + d), std::nanf(""));
      const int64_t inf_key = bad + 20;  // same parity, far enough that rows see one
      for (int64_t d = 0; d < c.d; ++d)
        pr.k.Set(static_cast<size_t>(inf_key * pr.p.k_stride[1] + d), INFINITY);
      ExpectBf16Kernel(pr.p);
      ASSERT_EQ(pr.Forward(), FLASH_OK);
      const reference::ForwardResult ref =
          reference::forward(pr.p, pr.q.data(), pr.k.data(), pr.v.data());
      for (int64_t s = 0; s < c.sq; ++s) {
        const bool sees_nan = s >= bad && (wl < 0 || s - wl <= bad);
        const bool sees_inf = s >= inf_key && (wl < 0 || s - wl <= inf_key);
        for (int64_t d = 0; d < c.d; ++d) {
          const float x = Problem::At(pr.o, pr.p.o_stride, 0, s, 0, d);
          if (sees_nan || sees_inf) {
            if (sees_nan) EXPECT_TRUE(std::isnan(x)) << "bad " << bad << " row " << s;
            continue;
          }
          ASSERT_TRUE(std::isfinite(x)) << "bad " << bad << " wl " << wl << " row " << s;
          EXPECT_NEAR(x, ref.o[static_cast<size_t>(s * c.d + d)], 2e-2)
              << "bad " << bad << " row " << s;
        }
      }
    }
  }
}

TEST_P(CpuBf16Kernel, BackwardOddSizesAndHeadDims) {
  const int64_t sizes[] = {1, 17, 113, 257};
  for (int64_t sq : sizes)
    for (int64_t sk : sizes) CheckBackward(Bf16(sq, sk, 64));
  for (int64_t d : {1, 7, 17, 33, 96, 128}) CheckBackward(Bf16(113, 257, d));
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{40, 72}, {128, 64}, {64, 200}, {3, 1}}) {
    Case c = Bf16(257, 113, d);
    c.dv = dv;
    CheckBackward(c);
  }
}

TEST_P(CpuBf16Kernel, BackwardMasksSoftcapGqaStrides) {
  for (bool causal : {false, true})
    for (auto [wl, wr] : {std::pair<int64_t, int64_t>{-1, -1}, {33, 5}, {0, 0}, {4, -1}})
      for (auto [sq, sk] : {std::pair<int64_t, int64_t>{113, 257}, {257, 113}}) {
        Case c = Bf16(sq, sk, 72);
        c.causal = causal;
        c.wl = wl;
        c.wr = wr;
        CheckBackward(c);
      }
  Case c = Bf16(257, 500, 128);  // GQA group 3, softcap, [b, h, s, d] strides
  c.batch = 2;
  c.hq = 6;
  c.hk = 2;
  c.softcap = 20.0f;
  c.layout = 1;
  CheckBackward(c);
  c.causal = true;
  c.layout = 2;  // padded rows: odd element strides
  c.hq = 4;
  c.hk = 1;
  c.softcap = 0.0f;
  CheckBackward(c);
  c = Bf16(300, 60, 32);  // windows: many rows see no key (their gradients are 0)
  c.wl = 3;
  c.wr = 1;
  CheckBackward(c);
}

// NaN in V and inf in K at an even and an odd key, under a causal 5-key window: dq of
// every row that sees neither, and dk / dv of every key seen only by such rows, stay
// finite and correct (a masked bad key must not leak through 0·NaN in any product).
TEST_P(CpuBf16Kernel, BackwardNanReachesOnlyRowsThatUseIt) {
  for (const int64_t bad : {70, 71}) {
    Case c = Bf16(150, 150, 32);
    c.causal = true;
    c.wl = 5;
    Problem pr(c, 13);
    const int64_t inf_key = bad + 20;
    for (int64_t d = 0; d < c.d; ++d) {
      pr.v.Set(static_cast<size_t>(bad * pr.p.v_stride[1] + d), std::nanf(""));
      pr.k.Set(static_cast<size_t>(inf_key * pr.p.k_stride[1] + d), INFINITY);
    }
    ExpectBf16Backward(pr.p);
    ASSERT_EQ(pr.Forward(), FLASH_OK);
    ASSERT_EQ(pr.Backward(), FLASH_OK);
    const reference::BackwardResult ref =
        reference::backward(pr.p, pr.q.data(), pr.k.data(), pr.v.data(), pr.dout.data());
    std::vector<bool> clean_row(c.sq), clean_key(c.sk, true);
    for (int64_t s = 0; s < c.sq; ++s)
      clean_row[s] = !reference::visible(pr.p, s, bad) && !reference::visible(pr.p, s, inf_key);
    for (int64_t s = 0; s < c.sq; ++s)
      for (int64_t j = 0; j < c.sk; ++j)
        if (!clean_row[s] && reference::visible(pr.p, s, j)) clean_key[j] = false;
    int64_t rows_checked = 0, keys_checked = 0;
    for (int64_t s = 0; s < c.sq; ++s) {
      if (!clean_row[s]) continue;
      ++rows_checked;
      for (int64_t d = 0; d < c.d; ++d) {
        const float x = Problem::At(pr.dq, pr.p.q_stride, 0, s, 0, d);
        ASSERT_TRUE(std::isfinite(x)) << "bad " << bad << " dq row " << s;
        EXPECT_NEAR(x, ref.dq[static_cast<size_t>(s * c.d + d)], 5e-2) << "dq row " << s;
      }
    }
    for (int64_t j = 0; j < c.sk; ++j) {
      if (!clean_key[j]) continue;
      ++keys_checked;
      for (int64_t d = 0; d < c.d; ++d) {
        const size_t i = static_cast<size_t>(j * c.d + d);
        const float dk = Problem::At(pr.dk, pr.p.k_stride, 0, j, 0, d);
        const float dv = Problem::At(pr.dv, pr.p.v_stride, 0, j, 0, d);
        ASSERT_TRUE(std::isfinite(dk) && std::isfinite(dv)) << "bad " << bad << " key " << j;
        EXPECT_NEAR(dk, ref.dk[i], 5e-2) << "dk key " << j;
        EXPECT_NEAR(dv, ref.dv[i], 5e-2) << "dv key " << j;
      }
    }
    EXPECT_GT(rows_checked, 100);  // the check covers most rows and keys
    EXPECT_GT(keys_checked, 100);
  }
}

// Bitwise equal o, lse, dq, dk and dv for 1, 2 and 3 threads and a repeat (items do not
// depend on the thread count; every output element comes from one item).
TEST_P(CpuBf16Kernel, BitwiseEqualAcrossThreadCounts) {
  Case c = Bf16(301, 277, 40);
  c.batch = 2;
  c.hq = 6;
  c.hk = 2;
  c.causal = true;
  c.wl = 90;
  const auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Problem pr(c, 11);
    ExpectBf16Kernel(pr.p);
    EXPECT_EQ(pr.Forward(), FLASH_OK);
    std::vector<uint8_t> out = pr.o.bytes;
    const uint8_t* l = reinterpret_cast<const uint8_t*>(pr.lse.data());
    out.insert(out.end(), l, l + pr.lse.size() * sizeof(float));
    ExpectBf16Backward(pr.p);
    EXPECT_EQ(pr.Backward(), FLASH_OK);
    for (const Tensor* g : {&pr.dq, &pr.dk, &pr.dv})
      out.insert(out.end(), g->bytes.begin(), g->bytes.end());
    return out;
  };
  const int saved = omp_get_max_threads();
  Case few_items = Bf16(301, 277, 40);  // 8 forward items: 4 q blocks x 2 heads
  few_items.hq = few_items.hk = 2;
  few_items.causal = true;
  // The second shape runs head-major on 1 thread and cost-major on 2 and 3 (fewer than 8
  // items per thread, Plan::OrderForThreads): the order must not matter.
  for (const Case& shape : {c, few_items}) {
    c = shape;
    const std::vector<uint8_t> one = run(1);
    EXPECT_TRUE(one == run(2)) << "2 threads differ";
    EXPECT_TRUE(one == run(3)) << "3 threads differ";
    EXPECT_TRUE(one == run(1)) << "repeat differs";
  }
  omp_set_num_threads(saved);
}

#if defined(FLASH_BF16_TEST_AMX_ONLY)
INSTANTIATE_TEST_SUITE_P(Emulated, CpuBf16Kernel, ::testing::Values(std::string("amx")),
                         [](const auto& info) { return info.param; });
#else
INSTANTIATE_TEST_SUITE_P(Targets, CpuBf16Kernel,
                         ::testing::Values(std::string("avx512bf16"), std::string("amx")),
                         [](const auto& info) { return info.param; });
#endif

}  // namespace
}  // namespace flash::cpu::test
