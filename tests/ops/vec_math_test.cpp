// The row primitives of ops/vec_math.hpp against double loops: lengths around every vector and
// unroll boundary (0 to 70, 511 to 513, 1000), the maximum at every position, -inf entries, and
// exp_sub_sum's cut-off below e^-64.
#include "attnkit/ops/vec_math.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "test_random.hpp"

namespace attnkit {
namespace {

std::vector<int64_t> vec_math_lengths() {
  std::vector<int64_t> n;
  for (int64_t i = 0; i <= 70; ++i) n.push_back(i);
  for (int64_t i : {511, 512, 513, 1000}) n.push_back(i);
  return n;
}

std::vector<float> vec_math_row(int64_t n, uint32_t seed, float sigma = 4.0f) {
  return randn(n, seed, sigma);
}

TEST(VecMath, RowMaxFindsTheMaximumAtEveryPosition) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(row_max(nullptr, 0), -inf);
  for (const int64_t n : vec_math_lengths()) {
    std::vector<float> x = vec_math_row(n, uint32_t(n) + 1);
    for (int64_t at = 0; at < n; ++at) {  // a unique largest entry at each position in turn
      std::vector<float> y = x;
      y[size_t(at)] = 100.0f + float(at % 7);
      ASSERT_EQ(row_max(y.data(), n), y[size_t(at)]) << "n " << n << " at " << at;
    }
    std::vector<float> masked(static_cast<size_t>(n), -inf);
    EXPECT_EQ(row_max(masked.data(), n), -inf) << "n " << n;
    if (n > 0) {
      masked[size_t(n - 1)] = -3.0f;
      EXPECT_EQ(row_max(masked.data(), n), -3.0f) << "n " << n;
    }
  }
}

TEST(VecMath, ExpSubSumMatchesDoubleAndCutsOffBelowEToTheMinus64) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const int64_t n : vec_math_lengths()) {
    std::vector<float> x = vec_math_row(n, uint32_t(n) + 7, 30.0f);  // many terms below e^-64
    if (n > 2) x[1] = -inf;
    // m above the row's maximum too: the flash backward passes lse, the forward a running max.
    const float m = (n > 0 ? row_max(x.data(), n) : 0.0f) + (n % 2 ? 3.0f : 0.0f);
    std::vector<float> y = x;
    const float sum = exp_sub_sum(y.data(), n, m);
    double want_sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      // x - m rounds in float32 (about |x - m|·2^-24 of the exponent); from there, exp to 2 ulp.
      const double d = double(x[size_t(j)] - m);
      const double want = d < -64 ? 0.0 : std::exp(d);
      want_sum += double(y[size_t(j)]);
      if (want == 0.0) {
        EXPECT_EQ(y[size_t(j)], 0.0f) << "n " << n << " j " << j << " x - m " << d;
      } else {
        EXPECT_NEAR(y[size_t(j)], want, 4e-7 * want) << "n " << n << " j " << j;
      }
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * std::max(1.0, want_sum)) << "n " << n;
  }
}

TEST(VecMath, SoftcapScaleAndDotMatchDouble) {
  for (const int64_t n : vec_math_lengths()) {
    const std::vector<float> x = vec_math_row(n, uint32_t(n) + 11, 40.0f);
    const std::vector<float> z = vec_math_row(n, uint32_t(n) + 13);
    std::vector<float> capped = x, scaled = x;
    softcap_inplace(capped.data(), n, 15.0f);
    scale_inplace(scaled.data(), n, 0.37f);
    double want_dot = 0, magnitude = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double c = 15.0 * std::tanh(double(x[size_t(j)]) / 15.0);
      // Highway's Tanh is within 4 ulp (about 4.8e-7), plus the rounding of x / c.
      EXPECT_NEAR(capped[size_t(j)], c, 6e-7 * std::max(1.0, std::abs(c))) << "n " << n << " j " << j;
      EXPECT_EQ(scaled[size_t(j)], x[size_t(j)] * 0.37f) << "n " << n << " j " << j;
      want_dot += double(x[size_t(j)]) * double(z[size_t(j)]);
      magnitude += std::abs(double(x[size_t(j)]) * double(z[size_t(j)]));
    }
    // Float accumulation: error within a few roundings at the size of Σ|x·z|.
    EXPECT_NEAR(dot(x.data(), z.data(), n), want_dot, 1e-6 * std::max(1.0, magnitude)) << "n " << n;
  }
}

}  // namespace
}  // namespace attnkit
