// Bilinear resizing of grey images (align_corners=False, as torch.nn.functional.interpolate) and
// the sizes it refuses.
#include "attnkit/io/image_file.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attnkit/core/error.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

GreyImage image(int64_t h, int64_t w, std::vector<uint8_t> pixels) {
  return {.height = h, .width = w, .channels_in_file = 1, .pixels = std::move(pixels)};
}

// Upsampling [[0, 100], [200, 40]] to 4×4 with pixel centres aligned: output centre (i + 0.5)/2
// - 0.5 of the input, clamped to the edges, so rows 0 and 3 and columns 0 and 3 repeat the
// border and the inner samples sit a quarter of the way between input pixels.
TEST(ResizeBilinear, MatchesHalfPixelInterpolationByHand) {
  const GreyImage in = image(2, 2, {0, 100, 200, 40});
  const GreyImage out = resize_bilinear(in, 4, 4);
  ASSERT_EQ(out.height, 4);
  ASSERT_EQ(out.width, 4);
  auto expected = [&](int64_t i, int64_t j) {
    auto coord = [](int64_t k) { return std::clamp((double(k) + 0.5) / 2.0 - 0.5, 0.0, 1.0); };
    const double y = coord(i), x = coord(j);
    const double top = (1 - x) * 0 + x * 100, bottom = (1 - x) * 200 + x * 40;
    return std::lround((1 - y) * top + y * bottom);
  };
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(out.pixels[size_t(i * 4 + j)], expected(i, j)) << i << "," << j;
  EXPECT_EQ(out.pixels[0], 0);   // a corner keeps its pixel
  EXPECT_EQ(out.pixels[5], 59);  // 0.75·(0.75·0 + 0.25·100) + 0.25·(0.75·200 + 0.25·40) = 58.75
}

TEST(ResizeBilinear, SameSizeIsTheInput) {
  const GreyImage in = image(2, 3, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(resize_bilinear(in, 2, 3).pixels, in.pixels);
}

// Sizes whose pixel count overflowed (2^32 × 2^32) crashed; an image claiming a size its pixels
// do not have was read past its end.
TEST(ResizeBilinear, RefusesSizesOutsideTheBound) {
  const GreyImage in = image(2, 2, {0, 1, 2, 3});
  const int64_t big = int64_t(1) << 32;
  expect_error([&] { resize_bilinear(in, big, big); },
               "resize_bilinear: target size 4294967296x4294967296 is outside 1..16384");
  expect_error([&] { resize_bilinear(in, int64_t(1) << 62, 4); }, "is outside 1..16384");
  expect_error([&] { resize_bilinear(in, 0, 4); }, "is outside 1..16384");
  expect_error([&] { resize_bilinear(in, kMaxImageSide + 1, 1); }, "is outside");
  expect_error([&] { resize_bilinear(image(big, big, {}), 4, 4); }, "malformed input image");
  expect_error([&] { resize_bilinear(image(3, 2, {0, 1, 2, 3}), 4, 4); }, "malformed input image");
  EXPECT_EQ(resize_bilinear(in, 1, kMaxImageSide).pixels.size(), size_t(kMaxImageSide));
}

}  // namespace
}  // namespace attnkit
