// Edge semantics, on every available backend: seqlen_q = 0 is a no-op; rows that see
// no key get o = 0 and lse = -inf; NaN in an input reaches only the rows that use it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "reference/naive.hpp"
#include "reference/reference.hpp"
#include "support/cases.hpp"
#include "support/compare.hpp"
#include "support/sanitized.hpp"
#include "support/targets.hpp"

namespace flash::test {
namespace {

class Edge : public testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    if (!GetParam().available) GTEST_SKIP() << GetParam().label << ": " << GetParam().reason;
  }
  template <class Fn>
  void on_target(Fn&& fn) {
    ScopedEnv simd("FLASH_CPU_TARGET", GetParam().simd.empty() ? nullptr : GetParam().simd.c_str());
    fn();
  }
  AttentionDesc desc(int64_t sq, int64_t sk) {
    AttentionDesc d;
    d.seqlen_q = sq;
    d.seqlen_kv = sk;
    d.heads_q = 2;
    d.heads_kv = 1;
    d.head_dim = 64;
    d.backend = GetParam().backend;
    return d;
  }
};

TEST_P(Edge, EmptyQueryIsANoOp) {
  AttentionDesc d = desc(0, 5);
  HostTensor k(DType::f32, 1, 5, 1, 64, Layout::packed), v = k;
  std::mt19937_64 rng(1);
  k.fill_random(rng, 1);
  v.fill_random(rng, 1);
  float sentinel = 42.f;
  on_target([&] { attention(d, nullptr, k.data(), v.data(), &sentinel); });
  EXPECT_EQ(sentinel, 42.f);
}

TEST_P(Edge, NoKeysGiveZeroOutputAndMinusInfinityLse) {
  for (const bool empty_kv : {true, false}) {
    // Either seqlen_kv = 0, or a causal mask with Sq > Sk hiding every key from row 0.
    AttentionDesc d = desc(4, empty_kv ? 0 : 2);
    d.causal = !empty_kv;
    HostTensor q(DType::f32, 1, 4, 2, 64, Layout::packed), o = q;
    HostTensor k(DType::f32, 1, d.seqlen_kv, 1, 64, Layout::packed), v = k;
    std::mt19937_64 rng(2);
    q.fill_random(rng, 1);
    k.fill_random(rng, 1);
    v.fill_random(rng, 1);
    o.poison();
    std::vector<float> lse = poisoned_lse(8);
    d.lse = lse.data();
    on_target([&] {
      attention(d, q.data(), empty_kv ? nullptr : k.data(), empty_kv ? nullptr : v.data(),
                o.data());
    });
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t dd = 0; dd < 64; ++dd)
        EXPECT_EQ(o.get(0, 0, h, dd), 0.0) << "empty_kv=" << empty_kv;
      EXPECT_TRUE(std::isinf(lse[h * 4]) && lse[h * 4] < 0) << lse[h * 4];
    }
  }
}

TEST_P(Edge, NanReachesOnlyTheRowsThatUseIt) {
  AttentionDesc d = desc(8, 8);
  d.causal = true;
  HostTensor q(DType::f32, 1, 8, 2, 64, Layout::packed), o = q;
  HostTensor k(DType::f32, 1, 8, 1, 64, Layout::packed), v = k;
  std::mt19937_64 rng(3);
  q.fill_random(rng, 1);
  k.fill_random(rng, 1);
  v.fill_random(rng, 1);
  q.set(0, 2, 0, 5, NAN);  // query row 2 of head 0
  k.set(0, 6, 0, 1, NAN);  // key 6: seen (causally) by rows 6 and 7 only
  on_target([&] { attention(d, q.data(), k.data(), v.data(), o.data()); });
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t h = 0; h < 2; ++h) {
      const bool poisoned = (i == 2 && h == 0) || i >= 6;
      for (int64_t dd = 0; dd < 64; ++dd)
        EXPECT_EQ(std::isnan(o.get(0, i, h, dd)), poisoned) << "row " << i << " head " << h;
    }
}

// NaN / inf in a value row that only some rows see, on the 16-bit paths at every tile
// width of the Hopper forward (64, 128, 256) and lengths where its tiles straddle the
// mask: causal diagonal tiles, window edges, first tiles that start before key 0. Tensor
// cores multiply a hidden key's p = 0 by its v row, and 0·NaN = NaN: the kernels must keep
// the rows that do not see the key finite (the exact path of fwd_wgmma_kernel.cuh).
// Under sanitizers (support/sanitized.hpp) 200 rows, key 100 and window 66: the cpu
// backend's tiles still straddle the key and both edges of the rows that see it.
TEST_P(Edge, NonFiniteValueReachesOnlyTheRowsThatSeeIt) {
  struct Band {
    const char* name;
    bool causal;
    int64_t left;  // window_left with window_right = 0 when not causal
  };
  constexpr int64_t kRows = kSanitized ? 200 : 300, kKey = kRows / 2, kCol = 3;
  const std::string window = "window " + std::to_string(kRows / 3);
  for (DType dtype : {DType::bf16, DType::f16})
    for (int64_t dim : {64, 128, 256})
      for (const Band band : {Band{"causal", true, -1}, Band{window.c_str(), false, kRows / 3}})
        for (double poison : {double(NAN), double(INFINITY)}) {
          SCOPED_TRACE(std::string(band.name) + " " + to_string(dtype) + " D " +
                       std::to_string(dim) + (std::isnan(poison) ? " NaN" : " inf"));
          AttentionDesc d = desc(kRows, kRows);
          d.dtype = dtype;
          d.head_dim = dim;
          d.causal = band.causal;
          if (!band.causal) {
            d.window_left = band.left;
            d.window_right = 0;
          }
          HostTensor q(dtype, 1, kRows, 2, dim, Layout::packed), o = q;
          HostTensor k(dtype, 1, kRows, 1, dim, Layout::packed), v = k;
          std::mt19937_64 rng(7);
          q.fill_random(rng, 1);
          k.fill_random(rng, 1);
          v.fill_random(rng, 1);
          v.set(0, kKey, 0, kCol, poison);
          o.poison();
          on_target([&] { attention(d, q.data(), k.data(), v.data(), o.data()); });
          // Every other element is what the same inputs give with the poisoned one zeroed
          // (it reaches only column kCol of the rows that see its key): the rows' values, not
          // only their finiteness, so that a wrong exact path fails here.
          HostTensor v_zeroed = v;
          v_zeroed.set(0, kKey, 0, kCol, 0.0);
          const flash_problem problem = resolve(d, q, k, v_zeroed, o);
          const reference::ForwardResult ref =
              reference::forward(problem, q.data(), k.data(), v_zeroed.data());
          const reference::ForwardResult naive =
              reference::naive_forward(problem, q.data(), k.data(), v_zeroed.data());
          std::vector<double> got = o.to_packed();  // [row, head, column]
          int wrong = 0;
          for (int64_t i = 0; i < kRows; ++i) {
            const bool sees = kKey <= i && (band.causal || kKey >= i - band.left);
            for (int64_t h = 0; h < 2; ++h)
              for (int64_t dd = 0; dd < dim; ++dd) {
                const bool finite = std::isfinite(o.get(0, i, h, dd));
                if (finite != !(sees && dd == kCol) && wrong++ < 5)
                  ADD_FAILURE() << "row " << i << " head " << h << " column " << dd << ": "
                                << o.get(0, i, h, dd) << (sees ? " (sees" : " (does not see")
                                << " key " << kKey << ")";
                const size_t at = static_cast<size_t>((i * 2 + h) * dim + dd);
                if (sees && dd == kCol) got[at] = ref.o[at];  // checked non-finite above
              }
          }
          const Verdict verdict = compare("o", got, ref.o, naive.o, dtype);
          EXPECT_TRUE(verdict.pass) << verdict.detail;
        }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, Edge, testing::ValuesIn(all_targets()),
                         [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace flash::test
