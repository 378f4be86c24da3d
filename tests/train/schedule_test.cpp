// Warmup + cosine schedule at known steps (values worked out by hand from the formula).
#include "attnkit/train/schedule.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

TEST(Schedule, KnownSteps) {
  const WarmupCosineSchedule s{.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = 10,
                               .total_steps = 110};
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(s, 0), 0.1);  // (0+1)/10
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(s, 4), 0.5);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(s, 9), 1.0);   // peak at W-1
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(s, 10), 1.0);  // cos(0)
  EXPECT_NEAR(warmup_cosine_lr(s, 60), 0.55, 1e-15);  // halfway: (max+min)/2
  // A quarter of the way: min + (1 + cos(π/4))/2 · (max − min).
  EXPECT_NEAR(warmup_cosine_lr(s, 35), 0.1 + 0.9 * (1 + std::sqrt(0.5)) / 2, 1e-15);
  EXPECT_NEAR(warmup_cosine_lr(s, 109), 0.1 + 0.45 * (1 + std::cos(std::numbers::pi * 0.99)),
              1e-15);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(s, 110), 0.1);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(s, 100000), 0.1);
}

TEST(Schedule, MonotoneAfterWarmup) {
  const WarmupCosineSchedule s{.max_lr = 3e-4, .min_lr = 3e-5, .warmup_steps = 5,
                               .total_steps = 50};
  for (int64_t t = 1; t < 5; ++t) EXPECT_GT(warmup_cosine_lr(s, t), warmup_cosine_lr(s, t - 1));
  for (int64_t t = 6; t <= 50; ++t) EXPECT_LT(warmup_cosine_lr(s, t), warmup_cosine_lr(s, t - 1));
}

TEST(Schedule, NoWarmupAndZeroLengthDecay) {
  EXPECT_DOUBLE_EQ(warmup_cosine_lr({.max_lr = 2, .min_lr = 1, .warmup_steps = 0,
                                     .total_steps = 4}, 0), 2.0);
  // W = N: warmup, then straight to min_lr.
  const WarmupCosineSchedule s{.max_lr = 2, .min_lr = 1, .warmup_steps = 4, .total_steps = 4};
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(s, 3), 2.0);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(s, 4), 1.0);
}

TEST(Schedule, RejectsBadSettings) {
  EXPECT_THROW(warmup_cosine_lr({.warmup_steps = 10, .total_steps = 5}, 0), Error);
  EXPECT_THROW(warmup_cosine_lr({.warmup_steps = -1}, 0), Error);
  EXPECT_THROW(warmup_cosine_lr({.max_lr = -1}, 0), Error);
  EXPECT_THROW(warmup_cosine_lr({}, -1), Error);
}

}  // namespace
}  // namespace attnkit
