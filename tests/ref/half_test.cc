#include "tests/ref/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace sm70ops::ref {
namespace {

bool is_half_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

TEST(Ref_Half, FloatToHalfEdges) {
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);    // largest finite
  EXPECT_EQ(float_to_half(65519.996f), 0x7bff);  // just below the midpoint
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);    // midpoint: ties to even = inf
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(is_half_nan(float_to_half(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);             // tie to even zero
  EXPECT_EQ(float_to_half(0x1.000002p-25f), 0x0001);      // just above the tie
  EXPECT_EQ(float_to_half(0x3p-25f), 0x0002);             // 1.5 units: tie to even 2
  EXPECT_EQ(float_to_half(0x1p-14f - 0x1p-24f), 0x03ff);  // largest subnormal
  EXPECT_EQ(float_to_half(0x1p-14f - 0x1p-26f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(float_to_half(0x1p-14f), 0x0400);             // smallest normal
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);      // tie to even mantissa
  EXPECT_EQ(float_to_half(1.0f + 0x3p-11f), 0x3c02);      // tie to even mantissa
  EXPECT_EQ(float_to_half(1e-40f), 0x0000);               // float subnormal
}

TEST(Ref_Half, HalfToFloatEdges) {
  EXPECT_EQ(half_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(half_to_float(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(half_to_float(0x0400), 0x1p-14f);
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
  EXPECT_EQ(half_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7c01)));  // signalling payload stays a NaN
}

TEST(Ref_Half, EveryHalfRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const uint16_t back = float_to_half(half_to_float(h));
    if (is_half_nan(h)) {
      EXPECT_TRUE(is_half_nan(back)) << std::hex << bits;
    } else {
      EXPECT_EQ(back, h) << std::hex << bits;
    }
  }
}

// Every midpoint between neighbouring finite halves is a float; it must go to the even one, and
// the floats just either side of it to the nearer one.
TEST(Ref_Half, EveryMidpointRoundsToEven) {
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const float mid = (half_to_float(h) + half_to_float(h + 1)) / 2;
    const uint16_t even = (h % 2 == 0) ? h : h + 1;
    ASSERT_EQ(float_to_half(mid), even) << std::hex << h;
    ASSERT_EQ(float_to_half(-mid), 0x8000 | even) << std::hex << h;
    ASSERT_EQ(float_to_half(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(float_to_half(std::nextafter(mid, 1e9f)), h + 1) << std::hex << h;
  }
}

}  // namespace
}  // namespace sm70ops::ref
