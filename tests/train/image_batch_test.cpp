// Image mini-batches: scaling and standardisation, crop-with-padding and flip augmentation
// (every output must be one allowed shift/flip of its source, all shifts and both flips occur,
// the same key reproduces the batch on any thread count, another epoch changes it), errors.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <tuple>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/train/image_batch.hpp"

namespace attnkit {
namespace {

ImageDataset make_dataset(int64_t n, int64_t rows, int64_t cols) {
  ImageDataset ds;
  ds.count = n, ds.rows = rows, ds.cols = cols;
  for (int64_t i = 0; i < n * rows * cols; ++i) ds.images.push_back(uint8_t((i * 37 + i / 7) % 251 + 1));
  for (int64_t i = 0; i < n; ++i) ds.labels.push_back(uint8_t(i % 10));
  return ds;
}

std::vector<float> batch(const ImageDataset& ds, const std::vector<int64_t>& idx,
                         const ImageBatchOptions& o, std::vector<int32_t>* labels = nullptr) {
  std::vector<float> x(idx.size() * size_t(ds.rows * ds.cols));
  std::vector<int32_t> l(idx.size());
  image_batch(View4::contiguous(x.data(), {int64_t(idx.size()), 1, ds.rows, ds.cols}), l, ds, idx, o);
  if (labels) *labels = l;
  return x;
}

TEST(ImageBatch, ScalesAndStandardises) {
  const ImageDataset ds = make_dataset(5, 3, 4);
  std::vector<int32_t> labels;
  const auto x = batch(ds, {4, 0}, {.mean = 0.25f, .std = 0.5f}, &labels);
  EXPECT_EQ(labels, (std::vector<int32_t>{4, 0}));
  for (int64_t p = 0; p < 12; ++p) {
    EXPECT_FLOAT_EQ(x[size_t(p)], (ds.images[size_t(4 * 12 + p)] / 255.0f - 0.25f) / 0.5f);
    EXPECT_FLOAT_EQ(x[size_t(12 + p)], (ds.images[size_t(p)] / 255.0f - 0.25f) / 0.5f);
  }
  const auto [mean, sd] = pixel_mean_std(ds);
  double s = 0, q = 0;
  for (uint8_t v : ds.images) s += v / 255.0, q += (v / 255.0) * (v / 255.0);
  EXPECT_NEAR(mean, s / double(ds.images.size()), 1e-12);
  EXPECT_NEAR(sd * sd, q / double(ds.images.size()) - mean * mean, 1e-12);
}

TEST(ImageBatch, CropAndFlipAreAllowedShiftsSeededAndThreadIndependent) {
  const int64_t n = 600, rows = 5, cols = 6, pad = 2;
  const ImageDataset ds = make_dataset(n, rows, cols);
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = (i * 7) % n;
  const ImageBatchOptions o{.pad = pad, .flip = true, .seed = 9, .epoch = 3};
  std::vector<float> x1, x2;
  {
    ThreadCountScope one(1);
    x1 = batch(ds, idx, o);
  }
  {
    ThreadCountScope two(2);
    x2 = batch(ds, idx, o);
  }
  EXPECT_EQ(x1, x2);
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  for (int64_t b = 0; b < n; ++b) {
    const uint8_t* src = ds.images.data() + idx[size_t(b)] * rows * cols;
    int matches = 0;
    for (int64_t dy = -pad; dy <= pad; ++dy)
      for (int64_t dx = -pad; dx <= pad; ++dx)
        for (bool flip : {false, true}) {
          bool same = true;
          for (int64_t r = 0; r < rows && same; ++r)
            for (int64_t c = 0; c < cols && same; ++c) {
              const int64_t sr = r + dy, sc = (flip ? cols - 1 - c : c) + dx;
              const float want = (sr >= 0 && sr < rows && sc >= 0 && sc < cols) ? src[sr * cols + sc] / 255.0f : 0.0f;
              same = std::abs(x1[size_t(b * rows * cols + r * cols + c)] - want) <= 1e-6f;
            }
          if (same) ++matches, seen.insert({dy, dx, flip});
        }
    EXPECT_GE(matches, 1) << "image " << b << " is no allowed crop/flip of its source";
  }
  EXPECT_EQ(seen.size(), size_t(2 * (2 * pad + 1) * (2 * pad + 1)));  // every shift and flip occurs
  ImageBatchOptions next = o;
  next.epoch = 4;
  EXPECT_NE(batch(ds, idx, next), x1);
}

TEST(ImageBatch, BadArguments) {
  const ImageDataset ds = make_dataset(3, 2, 2);
  std::vector<float> x(8);
  std::vector<int32_t> l(2);
  const std::vector<int64_t> bad = {0, 3};
  EXPECT_THROW(image_batch(View4::contiguous(x.data(), {2, 1, 2, 2}), l, ds, bad), Error);
  const std::vector<int64_t> ok = {0, 2};
  EXPECT_THROW(image_batch(View4::contiguous(x.data(), {2, 1, 2, 2}), l, ds, ok, {.std = 0}), Error);
  EXPECT_THROW(image_batch(View4::contiguous(x.data(), {1, 2, 2, 2}), l, ds, ok), Error);
}

}  // namespace
}  // namespace attnkit
