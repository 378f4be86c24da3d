#pragma once
// Test fixtures for the nn layers: guarded, row-padded float matrices (strided views with
// sentinel guard bands and padding that must survive every call), seeded random fills, error bars
// and a central-difference gradient helper.
//
// Bars. Fast path vs reference: |fast - ref| <= k·u·mag elementwise, u = 2^-24 (float rounding),
// mag = the sum of |terms| that form the element (usually the reference run on |inputs|), k the
// number of float roundings a term can go through (n + small for an n-term float sum: the
// classical worst-case bound γ_n ≈ n·u, so the bars never flake). Finite differences: see
// kFiniteDifferenceBar.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "attnkit/core/tensor.hpp"
#include "test_random.hpp"
#include "test_compare.hpp"

namespace attnkit::nn_testing {

constexpr double kU = 0x1p-24;  // unit roundoff of float
constexpr int64_t kGuard = 16;
constexpr float kSentinel = -12345.0f;

// A [rows, cols] float matrix with row stride cols + pad, padding and guard bands set to a
// sentinel; hands out views of the logical elements.
struct Mat {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<float> raw;

  Mat() = default;
  Mat(int64_t r, int64_t c, int64_t pad = 3) : rows(r), cols(c), ld(c + pad) {
    raw.assign(size_t(2 * kGuard + std::max<int64_t>(r * ld, 0)), kSentinel);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) at(i, j) = 0.0f;
  }
  float* base() { return raw.data() + kGuard; }
  const float* base() const { return raw.data() + kGuard; }
  float& at(int64_t i, int64_t j) { return base()[i * ld + j]; }
  float at(int64_t i, int64_t j) const { return base()[i * ld + j]; }
  View2 view() { return {base(), {rows, cols}, {ld, 1}}; }
  ConstView2 cview() const { return {base(), {rows, cols}, {ld, 1}}; }
  int64_t size() const { return rows * cols; }

  // Fills the logical elements with N(0, sigma²) from `seed`.
  Mat& randn(uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n01(0.0f, sigma);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) at(i, j) = n01(rng);
    return *this;
  }
  // Elementwise |x| (for magnitude runs of a reference).
  Mat abs() const {
    Mat m = *this;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) m.at(i, j) = std::abs(at(i, j));
    return m;
  }
  // True if guard bands and row padding still hold the sentinel.
  bool intact() const {
    for (int64_t i = 0; i < kGuard; ++i)
      if (raw[size_t(i)] != kSentinel || raw[raw.size() - 1 - size_t(i)] != kSentinel) return false;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = cols; j < ld; ++j)
        if (base()[i * ld + j] != kSentinel) return false;
    return true;
  }
};

inline std::vector<float> abs_vec(const std::vector<float>& v) {
  std::vector<float> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::abs(v[i]);
  return a;
}

// Checks |got - want| <= bar(i, j) for every element; reports the worst offender.
inline void expect_within(const Mat& got, const Mat& want,
                          const std::function<double(int64_t, int64_t)>& bar,
                          const std::string& what) {
  ASSERT_EQ(got.rows, want.rows);
  ASSERT_EQ(got.cols, want.cols);
  EXPECT_TRUE(got.intact()) << what << ": guard band or row padding overwritten";
  double worst = -1;
  int64_t wi = 0, wj = 0;
  for (int64_t i = 0; i < got.rows; ++i)
    for (int64_t j = 0; j < got.cols; ++j) {
      const double err = std::abs(double(got.at(i, j)) - double(want.at(i, j)));
      const double excess = std::isnan(err) ? INFINITY : err - bar(i, j);
      if (excess > worst) worst = excess, wi = i, wj = j;
    }
  EXPECT_LE(worst, 0.0) << what << ": element (" << wi << ", " << wj << ") got " << got.at(wi, wj)
                        << " want " << want.at(wi, wj) << " bar " << bar(wi, wj);
}

inline void expect_within(const std::vector<float>& got, const std::vector<float>& want,
                          const std::function<double(size_t)>& bar, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - double(want[i]));
    ASSERT_TRUE(err <= bar(i)) << what << "[" << i << "]: got " << got[i] << " want " << want[i]
                               << " bar " << bar(i);
  }
}

inline bool bitwise_equal(const Mat& a, const Mat& b) { return a.raw == b.raw; }

// Finite differences of a double loss computed from the reference's float outputs:
// central difference with h = 1e-2 (the step actually stored in float). Error budget: truncation
// h²/6·|L'''| (zero for the multilinear ops; <= ~1e-4 for the smooth ones on O(1) data) plus the
// float rounding of the perturbed outputs (~2^-24·Σ|r·y| / (2h), ~1e-5 here); unperturbed outputs
// round identically in both evaluations and cancel. A bar of 1e-3·max(1, |gradient|) leaves ~10x
// margin, while a wrong or missing gradient term is off by O(0.1..1)·|gradient|.
constexpr double kFiniteDifferenceBar = 1e-3;

// Central difference of loss() at *x with step h (divided by the steps as stored in float).
inline double numeric_grad(const std::function<double()>& loss, float* x, float h = 1e-2f) {
  const float saved = *x;
  *x = saved + h;
  const double up = loss(), x_up = *x;
  *x = saved - h;
  const double down = loss(), x_down = *x;
  *x = saved;
  return (up - down) / (x_up - x_down);
}

// Accumulates the worst |numeric - analytic| and the gradient scale over many entries.
struct GradCheck {
  double worst = 0, scale = 0;
  void add(double numeric, double analytic) {
    worst = worse_error(worst, std::abs(numeric - analytic));
    scale = std::max(scale, std::abs(numeric));
  }
  // Every logical element of x against the analytic gradient g (same shape).
  void sweep(const std::function<double()>& loss, Mat& x, const Mat& g) {
    for (int64_t i = 0; i < x.rows; ++i)
      for (int64_t j = 0; j < x.cols; ++j) add(numeric_grad(loss, &x.at(i, j)), g.at(i, j));
  }
  void sweep(const std::function<double()>& loss, std::vector<float>& x,
             const std::vector<float>& g) {
    for (size_t i = 0; i < x.size(); ++i) add(numeric_grad(loss, &x[i]), g[i]);
  }
  void expect_ok(const std::string& what) const {
    EXPECT_LT(worst, kFiniteDifferenceBar * std::max(1.0, scale)) << what << ": scale " << scale;
  }
};

// Central differences of loss() at `per_tensor` entries of each parameter tensor in `infos`
// (fields name, offset, numel into the flat `params`; entries drawn with mt19937(seed)) against
// the flat analytic gradient `grads`; expects each tensor's GradCheck ok and returns them in order.
template <class Infos>
std::vector<GradCheck> expect_sampled_gradients(const std::function<double()>& loss,
                                                std::span<float> params, const Infos& infos,
                                                const std::vector<float>& grads, int per_tensor,
                                                uint32_t seed = 5) {
  std::mt19937 pick(seed);
  std::vector<GradCheck> checks;
  for (const auto& p : infos) {
    GradCheck& check = checks.emplace_back();
    for (int k = 0; k < per_tensor; ++k) {
      const int64_t i = p.offset + int64_t(pick() % uint32_t(p.numel));
      check.add(numeric_grad(loss, &params[size_t(i)]), grads[size_t(i)]);
    }
    check.expect_ok(p.name);
  }
  return checks;
}

// Σ r ⊙ y in double: the scalar loss whose gradient w.r.t. y is r.
inline double weighted_sum(const Mat& y, const Mat& r) {
  double s = 0;
  for (int64_t i = 0; i < y.rows; ++i)
    for (int64_t j = 0; j < y.cols; ++j) s += double(y.at(i, j)) * double(r.at(i, j));
  return s;
}

}  // namespace attnkit::nn_testing
