// Global-norm clipping: the norm against a hand computation, the scale torch applies, no-op
// below the threshold, non-finite norms, thread-count invariance.
#include "attnkit/train/grad_clip.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"

namespace attnkit {
namespace {

TEST(GradClip, NormAndScaleByHand) {
  std::vector<float> a = {3, 4}, b = {12}, c = {};  // sqrt(9 + 16 + 144) = 13
  std::vector<std::span<float>> grads = {a, b, c};
  const double norm = clip_grad_norm(grads, 6.5);
  EXPECT_DOUBLE_EQ(norm, 13.0);
  const float s = float(6.5 / (13.0 + 1e-6));
  EXPECT_EQ(a[0], 3 * s);
  EXPECT_EQ(a[1], 4 * s);
  EXPECT_EQ(b[0], 12 * s);
  std::vector<std::span<const float>> after = {a, b};
  EXPECT_NEAR(global_grad_norm(after), 6.5, 1e-5);
}

TEST(GradClip, BelowThresholdLeavesGradientsAlone) {
  std::vector<float> a = {3, 4};
  std::vector<std::span<float>> grads = {a};
  EXPECT_DOUBLE_EQ(clip_grad_norm(grads, 5.1), 5.0);
  EXPECT_EQ(a, (std::vector<float>{3, 4}));
}

TEST(GradClip, NormIsDoubleAccurateAndThreadInvariant) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n01;
  std::vector<std::vector<float>> data = {std::vector<float>(100003), std::vector<float>(17),
                                          std::vector<float>(40000)};
  double ref = 0;  // plain double sum in element order
  for (auto& d : data)
    for (float& x : d) {
      x = n01(rng);
      ref += double(x) * double(x);
    }
  ref = std::sqrt(ref);
  std::vector<std::span<const float>> spans(data.begin(), data.end());
  double norm1, normn;
  {
    ThreadCountScope one(1);
    norm1 = global_grad_norm(spans);
  }
  {
    ThreadCountScope many(4);
    normn = global_grad_norm(spans);
  }
  EXPECT_EQ(norm1, normn);
  EXPECT_NEAR(norm1, ref, ref * 1e-13);
}

TEST(GradClip, NonFiniteNormReturnedGradientsUntouched) {
  std::vector<float> a = {1, std::numeric_limits<float>::infinity()};
  std::vector<std::span<float>> grads = {a};
  EXPECT_TRUE(std::isinf(clip_grad_norm(grads, 1.0)));
  EXPECT_EQ(a[0], 1.0f);
}

TEST(GradClip, RejectsBadMaxNorm) {
  std::vector<float> a = {1};
  std::vector<std::span<float>> grads = {a};
  EXPECT_THROW(clip_grad_norm(grads, 0.0), Error);
  EXPECT_THROW(clip_grad_norm(grads, -1.0), Error);
  EXPECT_THROW(clip_grad_norm(grads, std::nan("")), Error);
}

}  // namespace
}  // namespace attnkit
