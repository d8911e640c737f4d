// CPU kernels against a naive double-precision loop, on every SIMD target this
// machine supports (FLASH_CPU_TARGET switched between calls). Covers odd sizes,
// Sq != Sk both ways, GQA, causal and windows, softcap, Dv != D, strided layouts,
// f16/bf16, rows that see no key, and NaN isolation. The project-wide cross-backend
// suite repeats the full grid against the reference backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_test_util.h"
#include "reference/reference.hpp"
#include "support/oracle_cache.hpp"

namespace flash::cpu::test {
namespace {

// Tolerance relative to the largest reference magnitude of the tensor. f32 work
// with f32 accumulation; f16/bf16 additionally round the output once.
double Tolerance(int32_t dtype) {
  return dtype == FLASH_F32 ? 2e-5 : dtype == FLASH_F16 ? 2e-3 : 1.6e-2;
}

struct Error {
  double max_err = 0, max_ref = 0;
  bool nonfinite = false;
  void Add(double got, double ref) {
    if (!std::isfinite(got)) nonfinite = true;
    max_err = std::max(max_err, std::fabs(got - ref));
    max_ref = std::max(max_ref, std::fabs(ref));
  }
  bool Ok(double tol) const { return !nonfinite && max_err <= tol * std::max(1.0, max_ref); }
};

void CheckCase(const Case& c, bool backward) {
  Problem pr(c, 7);
  const flash_problem& p = pr.p;
  std::string err;
  ASSERT_EQ(pr.Forward(&err), FLASH_OK) << err;
  // The project's fp64 oracle on the same stored inputs (o/dq packed, lse [b, h, s]).
  struct {
    std::vector<double> o, lse, dq, dk, dv;
  } ref;
  // Computed once per case and shared by the SIMD targets (support/oracle_cache.hpp):
  // recomputing it per target was over half of this test's time.
  const auto bytes = [](Tensor& t) { return flash::test::bytes_of(t.data(), t.bytes.size()); };
  const reference::ForwardResult& fwd = flash::test::oracle_cached<reference::ForwardResult>(
      flash::test::oracle_key(p, {bytes(pr.q), bytes(pr.k), bytes(pr.v)}),
      [&] { return reference::forward(p, pr.q.data(), pr.k.data(), pr.v.data()); });
  ref.o = fwd.o;
  ref.lse = fwd.lse;
  if (backward) {
    const reference::BackwardResult& grad = flash::test::oracle_cached<reference::BackwardResult>(
        flash::test::oracle_key(p, {bytes(pr.q), bytes(pr.k), bytes(pr.v), bytes(pr.dout)}), [&] {
          return reference::backward(p, pr.q.data(), pr.k.data(), pr.v.data(), pr.dout.data());
        });
    ref.dq = grad.dq;
    ref.dk = grad.dk;
    ref.dv = grad.dv;
  }
  const int64_t Dv = p.head_dim_v, D = p.head_dim;
  Error eo, el;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t s = 0; s < c.sq; ++s)
      for (int64_t h = 0; h < c.hq; ++h) {
        for (int64_t d = 0; d < Dv; ++d)
          eo.Add(Problem::At(pr.o, p.o_stride, b, s, h, d),
                 ref.o[((b * c.sq + s) * c.hq + h) * Dv + d]);
        const double lr = ref.lse[(b * c.hq + h) * c.sq + s];
        const double lg = pr.lse[(b * c.hq + h) * c.sq + s];
        if (std::isinf(lr)) {
          EXPECT_TRUE(std::isinf(lg) && lg < 0) << c.Name() << " lse row " << s << " = " << lg;
        } else {
          el.Add(lg, lr);
        }
      }
  EXPECT_TRUE(eo.Ok(Tolerance(c.dtype)))
      << c.Name() << " o err " << eo.max_err << " nonfinite " << eo.nonfinite;
  EXPECT_TRUE(el.Ok(1e-4)) << c.Name() << " lse err " << el.max_err << " nonfinite "
                           << el.nonfinite;
  if (!backward) return;
  ASSERT_EQ(pr.Backward(&err), FLASH_OK) << err;
  Error eq, ek, ev;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t s = 0; s < c.sq; ++s)
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t d = 0; d < D; ++d)
          eq.Add(Problem::At(pr.dq, p.q_stride, b, s, h, d),
                 ref.dq[((b * c.sq + s) * c.hq + h) * D + d]);
    for (int64_t s = 0; s < c.sk; ++s)
      for (int64_t h = 0; h < c.hk; ++h) {
        for (int64_t d = 0; d < D; ++d)
          ek.Add(Problem::At(pr.dk, p.k_stride, b, s, h, d),
                 ref.dk[((b * c.sk + s) * c.hk + h) * D + d]);
        for (int64_t d = 0; d < Dv; ++d)
          ev.Add(Problem::At(pr.dv, p.v_stride, b, s, h, d),
                 ref.dv[((b * c.sk + s) * c.hk + h) * Dv + d]);
      }
  }
  // Gradients sum over many terms: allow 4x the forward's budget (bf16/f16 inputs of
  // the backward include the rounded forward output O).
  const double tol = 4 * Tolerance(c.dtype);
  EXPECT_TRUE(eq.Ok(tol)) << c.Name() << " dq err " << eq.max_err << " (max " << eq.max_ref
                          << ") nonfinite " << eq.nonfinite;
  EXPECT_TRUE(ek.Ok(tol)) << c.Name() << " dk err " << ek.max_err << " (max " << ek.max_ref
                          << ") nonfinite " << ek.nonfinite;
  EXPECT_TRUE(ev.Ok(tol)) << c.Name() << " dv err " << ev.max_err << " (max " << ev.max_ref
                          << ") nonfinite " << ev.nonfinite;
}

std::vector<Case> Grid() {
  std::vector<Case> cases;
  auto add = [&](Case c) { cases.push_back(c); };
  for (int64_t d : {1, 7, 16, 33, 64, 128}) {
    Case c;
    c.d = d;
    c.sq = 113;
    c.sk = 257;
    add(c);
  }
  for (int64_t sq : {1, 17, 200}) {
    for (int64_t sk : {1, 17, 200}) {
      for (bool causal : {false, true}) {
        Case c;
        c.sq = sq;
        c.sk = sk;
        c.causal = causal;
        c.d = 24;
        add(c);
      }
    }
  }
  {
    Case c;  // GQA, windows, Dv != D, batch, strided
    c.batch = 2;
    c.hq = 6;
    c.hk = 2;
    c.sq = 97;
    c.sk = 131;
    c.d = 40;
    c.dv = 24;
    for (int layout : {0, 1, 2}) {
      c.layout = layout;
      add(c);
    }
    c.layout = 1;
    c.wl = 20;
    c.wr = 5;
    add(c);
    c.causal = true;
    c.wr = -1;
    add(c);
    c.causal = false;
    c.wl = -1;
    c.wr = 0;
    add(c);
    c.wl = 3;
    c.wr = 1;
    c.sq = 300;
    c.sk = 60;  // many rows see no key
    add(c);
  }
  {
    Case c;  // softcap + causal, MQA with a large group
    c.hq = 8;
    c.hk = 1;
    c.sq = 65;
    c.sk = 190;
    c.d = 32;
    c.softcap = 5.0f;
    c.causal = true;
    add(c);
    c.causal = false;
    c.wl = 50;
    add(c);
  }
  {
    Case c;  // long causal: items of several row passes, passes skipping tiles
    c.sq = c.sk = 1500;
    c.d = 32;
    c.causal = true;
    add(c);
    c.causal = false;
    c.wl = 200;
    c.wr = 30;
    add(c);
  }
  {
    // Many heads: forward items of 4 row passes (>= Plan::kMinItems items) whose passes
    // skip tiles, and dK/dV items of 4 K/V tiles, one group partial.
    Case c;
    c.batch = 2;
    c.hq = c.hk = 16;
    c.sq = 400;
    c.sk = 150;
    c.d = 16;
    c.causal = true;
    c.wl = 40;
    add(c);
    c.hq = c.hk = 8;
    c.sq = 50;
    c.sk = 1200;
    c.wl = 700;
    add(c);
  }
  {
    Case c;  // wide heads (workspace growth), Dv tail, and MQA decode with 64 q heads
    c.hq = 4;
    c.hk = 2;
    c.sq = 70;
    c.sk = 130;
    c.d = 256;
    c.dv = 80;
    add(c);
    c.hq = 64;
    c.hk = 1;
    c.sq = 1;
    c.sk = 300;
    c.d = 64;
    c.dv = 0;
    add(c);
  }
  {
    Case c;  // decode-like
    c.hq = 4;
    c.hk = 2;
    c.sq = 1;
    c.sk = 1000;
    c.d = 64;
    add(c);
  }
  return cases;
}

class CpuKernel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { setenv("FLASH_CPU_TARGET", GetParam().c_str(), 1); }
  void TearDown() override { unsetenv("FLASH_CPU_TARGET"); }
};

TEST_P(CpuKernel, ForwardAndBackwardMatchNaiveF32) {
  for (const Case& c : Grid()) CheckCase(c, true);
}

TEST_P(CpuKernel, HalfPrecisionTypes) {
  for (int32_t dt : {FLASH_F16, FLASH_BF16}) {
    for (const Case& base : Grid()) {
      Case c = base;
      c.dtype = dt;
      CheckCase(c, true);
    }
  }
}

TEST_P(CpuKernel, EmptyKeysGiveZeroAndMinusInf) {
  Case c;
  c.sk = 0;
  Problem pr(c);
  ASSERT_EQ(pr.Forward(), FLASH_OK);
  for (int64_t s = 0; s < c.sq; ++s) {
    EXPECT_EQ(pr.lse[s], -std::numeric_limits<float>::infinity());
    for (int64_t d = 0; d < c.d; ++d) EXPECT_EQ(Problem::At(pr.o, pr.p.o_stride, 0, s, 0, d), 0.0f);
  }
  ASSERT_EQ(pr.Backward(), FLASH_OK);
  for (int64_t s = 0; s < c.sq; ++s)
    for (int64_t d = 0; d < c.d; ++d)
      EXPECT_EQ(Problem::At(pr.dq, pr.p.q_stride, 0, s, 0, d), 0.0f);
}

// A NaN in one V row reaches exactly the rows that see that key, also inside a
// boundary tile where other rows of the same tile mask it out.
TEST_P(CpuKernel, NanReachesOnlyRowsThatUseIt) {
  Case c;
  c.sq = c.sk = 150;
  c.causal = true;
  c.d = 16;
  Problem pr(c);
  const int64_t bad = 70;
  pr.v.Set(static_cast<size_t>(bad * pr.p.v_stride[1] + 3), std::nanf(""));
  ASSERT_EQ(pr.Forward(), FLASH_OK);
  for (int64_t s = 0; s < c.sq; ++s) {
    const bool uses = s >= bad;
    const float x = Problem::At(pr.o, pr.p.o_stride, 0, s, 0, 3);
    EXPECT_EQ(std::isnan(x), uses) << "row " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, CpuKernel, ::testing::ValuesIn(SupportedTargetNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace flash::cpu::test
