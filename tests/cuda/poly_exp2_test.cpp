// ctest cuda_poly_exp2 (host only, no GPU): poly_exp2 (backends/cuda/poly_exp2.hpp), the
// FMA-pipe 2^x that takes a share of the Hopper kernels' softmax exponents, against exp2 in
// double over its whole domain [-125, 64] (every 2^-12 step, and every 2^-20 in [-1, 1]),
// within its documented error (degree 3: 7.5e-5, degree 4: 2.7e-6, each
// checked with a little margin, 1.1x); and the special values the softmax relies on: -inf
// and anything below -125 give exactly +0 (masked scores: a masked key's NaN in V must meet
// p = 0), NaN stays NaN, 2^n is exact within the polynomial's error at integers.
#include "poly_exp2.hpp"

#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>

namespace {

int failures = 0;

void expect(bool ok, const char* what, double x, double got) {
  if (ok) return;
  if (++failures <= 10) std::printf("FAIL %s: x = %.9g gives %.9g\n", what, x, got);
}

template <int kDegree>
double worst_relative_error(double& worst_x) {
  double worst = 0;
  const auto check = [&](float x) {
    const double got = flash::cuda::poly_exp2<kDegree>(x);
    const double e = std::fabs(got / std::exp2(static_cast<double>(x)) - 1);
    if (!(e <= worst)) {  // NaN counts as worst
      worst = e;
      worst_x = x;
    }
  };
  for (int i = -125 * 4096; i <= 64 * 4096; ++i) check(static_cast<float>(i) / 4096);
  for (int i = -(1 << 20); i <= (1 << 20); ++i) check(std::ldexp(static_cast<float>(i), -20));
  return worst;
}

}  // namespace

int main() {
  using flash::cuda::poly_exp2;
  double x3 = 0, x4 = 0;
  const double e3 = worst_relative_error<3>(x3), e4 = worst_relative_error<4>(x4);
  std::printf(
      "poly_exp2: worst relative error degree 3 %.3g (x = %.9g), degree 4 %.3g (x = %.9g)\n", e3,
      x3, e4, x4);
  expect(e3 <= 1.1 * 7.5e-5, "degree 3 error above 8.25e-5", x3, e3);
  expect(e4 <= 1.1 * 2.7e-6, "degree 4 error above 2.97e-6", x4, e4);
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {-inf, -1e30f, -1000.f, -126.f, -125.5f, -125.0001f}) {
    expect(poly_exp2<3>(x) == 0.f && !std::signbit(poly_exp2<3>(x)), "degree 3: not +0", x,
           poly_exp2<3>(x));
    expect(poly_exp2<4>(x) == 0.f && !std::signbit(poly_exp2<4>(x)), "degree 4: not +0", x,
           poly_exp2<4>(x));
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect(std::isnan(poly_exp2<3>(nan)), "degree 3: NaN lost", nan, poly_exp2<3>(nan));
  expect(std::isnan(poly_exp2<4>(nan)), "degree 4: NaN lost", nan, poly_exp2<4>(nan));
  expect(poly_exp2<4>(-125.f) > 0.f, "degree 4: 2^-125 not positive", -125, poly_exp2<4>(-125.f));
  if (failures) std::printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
