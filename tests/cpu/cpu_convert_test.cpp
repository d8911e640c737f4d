// The output rounding of backends/cpu/convert.h: every f16 / bf16 value round-trips,
// midpoints between neighbours round to the even one, anything past a midpoint rounds
// away, overflow goes to inf, NaN stays NaN. Exhaustive over all 2^16 bit patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu_test_util.h"

namespace flash::cpu::test {
namespace {

template <class Narrow>
void CheckAllPatterns(int32_t dtype, Narrow narrow) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float x = Widen(dtype, &h, 0);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(Widen(dtype, &h, 0)));
      const uint16_t back = narrow(x);
      EXPECT_TRUE(std::isnan(Widen(dtype, &back, 0))) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(narrow(x), h) << "round trip of 0x" << std::hex << bits;
    if (std::isinf(x) || (bits & 0x7fff) == (dtype == FLASH_F16 ? 0x7bffu : 0x7f7fu)) continue;
    // Neighbour away from zero and the midpoint between the two (exact in f32/f64).
    const uint16_t next = static_cast<uint16_t>(bits + 1);
    const double mid = 0.5 * (double(x) + double(Widen(dtype, &next, 0)));
    const float midf = static_cast<float>(mid);
    ASSERT_EQ(double(midf), mid);
    const uint16_t even = (h & 1) ? next : h;
    EXPECT_EQ(narrow(midf), even) << "tie at 0x" << std::hex << bits;
    const float above = std::nextafter(midf, std::signbit(x) ? -INFINITY : INFINITY);
    const float below = std::nextafter(midf, std::signbit(x) ? INFINITY : -INFINITY);
    EXPECT_EQ(narrow(above), next) << "past the tie at 0x" << std::hex << bits;
    EXPECT_EQ(narrow(below), h) << "before the tie at 0x" << std::hex << bits;
  }
}

TEST(CpuConvert, F16RoundsToNearestEven) {
  CheckAllPatterns(FLASH_F16, [](float f) { return F16FromF32(f); });
  EXPECT_EQ(F16FromF32(65519.996f), 0x7bff);  // just below the overflow tie
  EXPECT_EQ(F16FromF32(65520.0f), 0x7c00);    // tie with "65536" rounds to inf (even)
  EXPECT_EQ(F16FromF32(1e30f), 0x7c00);
  EXPECT_EQ(F16FromF32(-1e30f), 0xfc00);
  EXPECT_EQ(F16FromF32(1e-30f), 0x0000);
}

TEST(CpuConvert, Bf16RoundsToNearestEven) {
  CheckAllPatterns(FLASH_BF16, [](float f) { return Bf16FromF32(f); });
  EXPECT_EQ(Bf16FromF32(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
}

}  // namespace
}  // namespace flash::cpu::test
