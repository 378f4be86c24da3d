// f16/bf16 conversions: exhaustive round trips and round-to-nearest-even at the halfway points.
#include "attnkit/core/dtype.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

namespace attnkit {
namespace {

TEST(DType, F16RoundTripsEveryBitPattern) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(DType, F16RoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00u);
  // 1 + 3·2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02u);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01u);  // just above halfway rounds up
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bffu);                    // largest finite
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bffu);                    // below the rounding boundary
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00u);                    // rounds to infinity
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001u);                    // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000u);                    // halfway to 0: ties to even
  EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002u);                  // 1.5·2^-24: ties to even (2)
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00u);
}

TEST(DType, Bf16RoundTripsAndRoundsToNearestEven) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = bf16_to_f32(uint16_t(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f), b);
  }
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80u);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82u);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81u);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, ParsesSafetensorsNames) {
  EXPECT_EQ(parse_dtype("BF16"), DType::bf16);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_name(DType::boolean), "BOOL");
  EXPECT_FALSE(parse_dtype("F17").has_value());
}

}  // namespace
}  // namespace attnkit
