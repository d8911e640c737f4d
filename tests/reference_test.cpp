// The oracle's own tests: closed forms, and the backward against central finite
// differences of the forward, all in double.
#include "reference/reference.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "reference/dtype.hpp"
#include "support/cases.hpp"

namespace flash::test {
namespace {

AttentionDesc small_desc(int64_t sq, int64_t sk, int64_t d) {
  AttentionDesc desc;
  desc.batch = 1;
  desc.seqlen_q = sq;
  desc.seqlen_kv = sk;
  desc.head_dim = d;
  return desc;
}

TEST(Reference, IdenticalKeysGiveTheMeanOfV) {
  AttentionDesc desc = small_desc(5, 9, 7);
  HostTensor q(DType::f32, 1, 5, 1, 7, Layout::packed), k(DType::f32, 1, 9, 1, 7, Layout::packed),
      v(DType::f32, 1, 9, 1, 7, Layout::packed), o = q;
  std::mt19937_64 rng(1);
  q.fill_random(rng, 1);
  v.fill_random(rng, 1);
  for (int64_t j = 0; j < 9; ++j)
    for (int64_t d = 0; d < 7; ++d) k.set(0, j, 0, d, 0.25 * (d + 1));
  const auto r = reference::forward(resolve(desc, q, k, v, o), q.data(), k.data(), v.data());
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t d = 0; d < 7; ++d) {
      double mean = 0;
      for (int64_t j = 0; j < 9; ++j) mean += v.get(0, j, 0, d) / 9;
      EXPECT_NEAR(r.o[i * 7 + d], mean, 1e-14);
    }
}

TEST(Reference, ASingleVisibleKeyGivesThatRowOfV) {
  // Causal with Sq = Sk: row 0 sees only key 0. A window of width 0 shows one key.
  AttentionDesc desc = small_desc(6, 6, 4);
  desc.causal = true;
  desc.window_left = 0;
  HostTensor q(DType::f32, 1, 6, 1, 4, Layout::packed), k = q, v = q, o = q;
  std::mt19937_64 rng(2);
  q.fill_random(rng, 3);
  k.fill_random(rng, 3);
  v.fill_random(rng, 1);
  const auto p = resolve(desc, q, k, v, o);
  const auto r = reference::forward(p, q.data(), k.data(), v.data());
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t d = 0; d < 4; ++d) EXPECT_DOUBLE_EQ(r.o[i * 4 + d], v.get(0, i, 0, d));
    double s = 0;
    for (int64_t d = 0; d < 4; ++d) s += q.get(0, i, 0, d) * k.get(0, i, 0, d);
    EXPECT_NEAR(r.lse[i], s * p.scale, 1e-12);  // lse of one key is its score
  }
}

TEST(Reference, RowsWithoutVisibleKeysGiveZeroAndMinusInfinity) {
  AttentionDesc desc = small_desc(5, 2, 3);
  desc.causal = true;  // bottom-right: rows 0..2 see nothing
  HostTensor q(DType::f32, 1, 5, 1, 3, Layout::packed), k(DType::f32, 1, 2, 1, 3, Layout::packed),
      v = k, o = q;
  std::mt19937_64 rng(3);
  q.fill_random(rng, 1);
  k.fill_random(rng, 1);
  v.fill_random(rng, 1);
  const auto r = reference::forward(resolve(desc, q, k, v, o), q.data(), k.data(), v.data());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(std::isinf(r.lse[i]) && r.lse[i] < 0);
    for (int d = 0; d < 3; ++d) EXPECT_EQ(r.o[i * 3 + d], 0.0);
  }
  EXPECT_TRUE(std::isfinite(r.lse[3]));
}

// Central differences of L = sum(o * dout) with respect to every input element.
// Inputs are multiples of 2^-12 and the step is 2^-10, so x +- h is exact in f32.
TEST(Reference, BackwardMatchesFiniteDifferences) {
  for (const bool softcap : {false, true}) {
    AttentionDesc desc = small_desc(4, 6, 3);
    desc.heads_q = 2;
    desc.heads_kv = 1;
    desc.head_dim_v = 2;
    desc.causal = true;
    desc.window_left = 3;
    if (softcap) desc.softcap = 1.5f;
    HostTensor q(DType::f32, 1, 4, 2, 3, Layout::bhsd), k(DType::f32, 1, 6, 1, 3, Layout::packed),
        v(DType::f32, 1, 6, 1, 2, Layout::padded), o(DType::f32, 1, 4, 2, 2, Layout::packed);
    HostTensor dout = o;
    std::mt19937_64 rng(4);
    for (HostTensor* t : {&q, &k, &v, &dout}) {
      t->fill_random(rng, 2);
      for (int64_t s = 0; s < t->seq; ++s)
        for (int64_t h = 0; h < t->heads; ++h)
          for (int64_t d = 0; d < t->dim; ++d)
            t->set(0, s, h, d, std::round(t->get(0, s, h, d) * 4096) / 4096);
    }
    desc.q_stride = q.stride;
    desc.v_stride = v.stride;
    const flash_problem p = resolve(desc, q, k, v, o);
    const auto grad = reference::backward(p, q.data(), k.data(), v.data(), dout.data());
    const std::vector<double> dout_packed = dout.to_packed();
    auto loss = [&] {
      const auto r = reference::forward(p, q.data(), k.data(), v.data());
      double l = 0;
      for (size_t i = 0; i < r.o.size(); ++i) l += r.o[i] * dout_packed[i];
      return l;
    };
    const double h = 1.0 / 1024;
    auto check = [&](HostTensor& t, const std::vector<double>& g, const char* name) {
      size_t index = 0;
      for (int64_t s = 0; s < t.seq; ++s)
        for (int64_t hh = 0; hh < t.heads; ++hh)
          for (int64_t d = 0; d < t.dim; ++d, ++index) {
            const double x = t.get(0, s, hh, d);
            t.set(0, s, hh, d, x + h);
            const double up = loss();
            t.set(0, s, hh, d, x - h);
            const double down = loss();
            t.set(0, s, hh, d, x);
            EXPECT_NEAR(g[index], (up - down) / (2 * h), 2e-5)
                << name << "[" << s << "," << hh << "," << d << "] softcap=" << softcap;
          }
    };
    check(q, grad.dq, "dq");
    check(k, grad.dk, "dk");
    check(v, grad.dv, "dv");
  }
}

TEST(ReferenceDtype, RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(reference::float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(reference::float_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(reference::float_to_f16(65504.f), 0x7BFF);
  EXPECT_EQ(reference::float_to_f16(1e6f), 0x7C00);
  EXPECT_EQ(reference::f16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(reference::float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie -> even
  EXPECT_EQ(reference::float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie -> even
  EXPECT_TRUE(std::isnan(reference::bf16_to_float(reference::float_to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(reference::f16_to_float(reference::float_to_f16(NAN))));
  for (uint32_t bits = 0; bits < 0x7C00; bits += 7)
    EXPECT_EQ(reference::float_to_f16(reference::f16_to_float(bits)), bits);
}

}  // namespace
}  // namespace flash::test
