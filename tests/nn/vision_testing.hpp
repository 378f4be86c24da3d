#pragma once
// Test fixtures for the NCHW layers: contiguous float buffers with sentinel guard bands on both
// sides, seeded random fills, and a central-difference check over every element of a buffer.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attnkit/core/tensor.hpp"
#include "nn/nn_testing.hpp"

namespace attnkit::vision_testing {

using nn_testing::kGuard;
using nn_testing::kSentinel;

// A contiguous buffer of `n` floats between guard bands holding a sentinel.
struct Buf {
  std::vector<float> raw;
  int64_t n = 0;
  explicit Buf(int64_t size = 0) : raw(size_t(size + 2 * kGuard), kSentinel), n(size) {
    for (int64_t i = 0; i < n; ++i) data()[i] = 0.0f;
  }
  float* data() { return raw.data() + kGuard; }
  const float* data() const { return raw.data() + kGuard; }
  float& operator[](int64_t i) { return data()[i]; }
  float operator[](int64_t i) const { return data()[i]; }
  View4 v4(std::array<int64_t, 4> s) { return View4::contiguous(data(), s); }
  ConstView4 c4(std::array<int64_t, 4> s) const { return ConstView4::contiguous(data(), s); }
  View2 v2(int64_t r, int64_t c) { return View2::contiguous(data(), {r, c}); }
  ConstView2 c2(int64_t r, int64_t c) const { return ConstView2::contiguous(data(), {r, c}); }
  std::span<float> span() { return {data(), size_t(n)}; }
  std::span<const float> cspan() const { return {data(), size_t(n)}; }
  Buf& randn(uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, sigma);
    for (int64_t i = 0; i < n; ++i) data()[i] = d(rng);
    return *this;
  }
  bool intact() const {
    for (int64_t i = 0; i < kGuard; ++i)
      if (raw[size_t(i)] != kSentinel || raw[raw.size() - 1 - size_t(i)] != kSentinel) return false;
    return true;
  }
};

// Σ r⊙y in double.
inline double weighted(const Buf& y, const Buf& r) {
  double s = 0;
  for (int64_t i = 0; i < y.n; ++i) s += double(y[i]) * double(r[i]);
  return s;
}

// Central differences of `loss` over every element of x against the analytic gradient g.
// same_branch, if given, is called after each perturbed evaluation and returns false when a
// max/argmax picked another element than at x (a kink, where the difference is meaningless);
// such elements are skipped, and at most a tenth of them may be.
inline void expect_gradient(const std::function<double()>& loss, Buf& x, const Buf& g,
                            const std::string& what, float h = 1e-2f,
                            const std::function<bool()>& same_branch = {}) {
  ASSERT_EQ(x.n, g.n) << what;
  double worst = 0, scale = 0;
  int64_t wi = 0, skipped = 0;
  for (int64_t i = 0; i < x.n; ++i) {
    const float saved = x[i];
    x[i] = saved + h;
    const double up = loss(), x_up = x[i];
    const bool up_ok = !same_branch || same_branch();
    x[i] = saved - h;
    const double down = loss(), x_down = x[i];
    const bool down_ok = !same_branch || same_branch();
    x[i] = saved;
    if (!up_ok || !down_ok) {
      ++skipped;
      continue;
    }
    const double num = (up - down) / (x_up - x_down);
    if (std::abs(num - g[i]) > worst) worst = std::abs(num - g[i]), wi = i;
    scale = std::max(scale, std::abs(num));
  }
  EXPECT_LT(worst, nn_testing::kFiniteDifferenceBar * std::max(1.0, scale))
      << what << ": worst at " << wi << " analytic " << g[wi] << ", scale " << scale;
  EXPECT_LE(skipped * 10, x.n) << what << ": " << skipped << " elements sit at a max kink";
}

}  // namespace attnkit::vision_testing
