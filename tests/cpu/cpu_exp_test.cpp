// Accuracy of the vectorised 2^x (backends/cpu/exp-inl.h) on every supported SIMD
// target, and of the bf16 kernels' 2^x for x <= 0 (avx512bf16_softmax.h), against
// std::exp2 in double: the bound each header states, and the edge values the softmax
// depends on (-inf -> 0, huge negative -> 0, 0 -> exactly 1, NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "backends/cpu/avx512bf16.h"
#include "backends/cpu/targets.h"

namespace flash::cpu {
namespace {

// Distance in units of the last place of the f32 result.
double Ulps(float got, double want) {
  const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
  return std::fabs(got - want) / ulp;
}

class Exp2Test : public ::testing::TestWithParam<size_t> {
 protected:
  const TargetKernels& target() const { return SupportedTargets()[GetParam()]; }
  std::vector<float> Run(const std::vector<float>& in) const {
    std::vector<float> out(in.size(), -1.0f);
    target().exp2(in.data(), out.data(), in.size());
    return out;
  }
};

TEST_P(Exp2Test, WithinTwoUlpOnTheNormalRange) {
  std::vector<float> in;
  for (double x = -126.0; x < 127.4; x += 0.0137) in.push_back(static_cast<float>(x));
  for (float x = -1.0f; x <= 1.0f; x += 1.0f / 1024) in.push_back(x);  // near the peak
  const std::vector<float> out = Run(in);
  double worst = 0;
  float worst_x = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const double u = Ulps(out[i], std::exp2(static_cast<double>(in[i])));
    if (u > worst) {
      worst = u;
      worst_x = in[i];
    }
  }
  std::printf("%s: max error %.2f ulp (at x = %g)\n", target().name, worst, worst_x);
  EXPECT_LE(worst, 2.0) << target().name << ": worst at x = " << worst_x;
}

TEST_P(Exp2Test, EdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> in = {0.0f, -0.0f, -inf,   -1e30f, -150.0f, -127.0f,
                                 1.0f, -1.0f, 128.0f, 1e30f,  inf,     std::nanf("")};
  const std::vector<float> out = Run(in);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], 0.0f);  // exp(-inf - m): a masked score contributes exactly 0
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(out[4], 0.0f);
  EXPECT_EQ(out[5], 0.0f);
  EXPECT_EQ(out[6], 2.0f);
  EXPECT_EQ(out[7], 0.5f);
  EXPECT_EQ(out[8], inf);
  EXPECT_EQ(out[9], inf);
  EXPECT_EQ(out[10], inf);
  EXPECT_TRUE(std::isnan(out[11]));
}

TEST_P(Exp2Test, ExactPowersOfTwo) {
  std::vector<float> in;
  for (int n = -126; n <= 127; ++n) in.push_back(static_cast<float>(n));
  const std::vector<float> out = Run(in);
  for (size_t i = 0; i < in.size(); ++i)
    EXPECT_EQ(out[i], std::ldexp(1.0f, static_cast<int>(in[i]))) << "x = " << in[i];
}

// The bf16 kernels' softmax exponential (avx512bf16_softmax.h, Exp2NonPositive): 2^x for
// x <= 0 with a degree-5 polynomial: <= 3 ulp, exact powers of two, and the edges the
// softmax needs.
TEST(Exp2NonPositive, WithinTwoUlpAndExactEdges) {
  const Exp2ArrayFn exp2 = Avx512Bf16Exp2Array();
  if (!Avx512Bf16Missing().empty() || exp2 == nullptr)
    GTEST_SKIP() << "avx512bf16 unavailable: " << Avx512Bf16Missing();
  std::vector<float> in;
  for (double x = -126.0; x <= 0.0; x += 0.0037) in.push_back(static_cast<float>(x));
  for (float x = -1.0f; x <= 0.0f; x += 1.0f / 4096) in.push_back(x);  // near the peak
  for (int n = -126; n <= 0; ++n) in.push_back(static_cast<float>(n));
  in.push_back(-0.0f);
  std::vector<float> out(in.size(), -1.0f);
  exp2(in.data(), out.data(), in.size());
  double worst = 0;
  float worst_x = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const double u = Ulps(out[i], std::exp2(static_cast<double>(in[i])));
    if (u > worst) {
      worst = u;
      worst_x = in[i];
    }
    if (in[i] == std::floor(in[i])) EXPECT_EQ(out[i], std::exp2(in[i])) << "x = " << in[i];
  }
  // 1.6e-7 relative is up to ~2.2 ulp where the result's mantissa is small; P is
  // rounded to bf16 (2^-9) anyway, and l's relative error stays ~1e-7.
  std::printf("Exp2NonPositive: max error %.2f ulp (at x = %g)\n", worst, worst_x);
  EXPECT_LE(worst, 3.0) << "worst at x = " << worst_x;
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {-inf, -1e30f, -150.0f, -127.0f, -126.75f, std::nanf("")};
  std::vector<float> edge_out(edges.size(), -1.0f);
  exp2(edges.data(), edge_out.data(), edges.size());  // also a partial vector
  for (size_t i = 0; i + 1 < edges.size(); ++i)
    EXPECT_EQ(edge_out[i], 0.0f) << "x = " << edges[i];  // masked scores: exactly +0
  EXPECT_TRUE(std::isnan(edge_out.back()));
}

INSTANTIATE_TEST_SUITE_P(Targets, Exp2Test, ::testing::Range(size_t{0}, SupportedTargets().size()),
                         [](const auto& info) {
                           return std::string(SupportedTargets()[info.param].name);
                         });

}  // namespace
}  // namespace flash::cpu
