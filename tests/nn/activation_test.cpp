// GELU (exact and tanh), SiLU and SwiGLU: fast (Highway) vs the double reference with bars from
// each formula's float roundings, reference gradients by finite differences, in-place use and
// fused gate/up halves of one [T, 2C] buffer.
#include "attnkit/nn/activation.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/core/error.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using nn_testing::kU;
using nn_testing::Mat;

// Inputs spread over [-10, 10] so both saturated tails and the curved middle are hit.
Mat spread(int64_t t, int64_t c, uint32_t seed) { return Mat(t, c).randn(seed, 3.0f); }

const GeluApproximation kApprox[] = {GeluApproximation::kNone, GeluApproximation::kTanh};

TEST(NnActivation, GeluFastMatchesReference) {
  for (auto approx : kApprox)
    for (int64_t t : {1, 7, 65})
      for (int64_t c : {1, 17, 64}) {
        SCOPED_TRACE(::testing::Message() << "tanh=" << (approx == GeluApproximation::kTanh)
                                        << " T=" << t << " C=" << c);
        const Mat x = spread(t, c, uint32_t(t + c)), d_y = Mat(t, c).randn(3);
        Mat y(t, c), y_ref(t, c), d_x(t, c), d_x_ref(t, c);
        gelu_forward(y.view(), x.cview(), approx);
        gelu_forward_reference(y_ref.view(), x.cview(), approx);
        // y = x/2·(1 + f), f = tanh or erf within ~4 ulp, its argument rounded twice: 8u(|x| +
        // |y|).
        nn_testing::expect_within(
            y, y_ref,
            [&](int64_t i, int64_t j) {
              return 8 * kU * (std::abs(x.at(i, j)) + std::abs(y_ref.at(i, j)));
            },
            "y");
        gelu_backward(d_x.view(), d_y.cview(), x.cview(), approx);
        gelu_backward_reference(d_x_ref.view(), d_y.cview(), x.cview(), approx);
        // gelu' = (1 + f)/2 + x·(1 - f²)·(...) or Φ + x·φ: terms bounded by 1 + |x|·(1 + x²).
        nn_testing::expect_within(
            d_x, d_x_ref,
            [&](int64_t i, int64_t j) {
              const double v = std::abs(x.at(i, j));
              return 16 * kU * std::abs(d_y.at(i, j)) * (1 + v * (1 + v * v));
            },
            "d_x");
      }
}

TEST(NnActivation, SiluAndSwigluFastMatchReference) {
  for (int64_t t : {1, 7, 65})
    for (int64_t c : {1, 17, 64}) {
      SCOPED_TRACE(::testing::Message() << "T=" << t << " C=" << c);
      // gate and up are the two halves of one fused [T, 2C] projection (strided views).
      Mat fused = spread(t, 2 * c, uint32_t(3 * t + c));
      const ConstView2 gate{fused.base(), {t, c}, {fused.ld, 1}};
      const ConstView2 up{fused.base() + c, {t, c}, {fused.ld, 1}};
      auto g = [&](int64_t i, int64_t j) { return double(fused.at(i, j)); };
      auto u = [&](int64_t i, int64_t j) { return double(fused.at(i, c + j)); };
      const Mat d_y = Mat(t, c).randn(4);
      Mat y(t, c), y_ref(t, c), d_x(t, c), d_x_ref(t, c);
      silu_forward(y.view(), gate);
      silu_forward_reference(y_ref.view(), gate);
      // σ = 1/(1 + e) with e within 2 ulp: σ within 4u, y = x·σ within 5u|x|.
      nn_testing::expect_within(
          y, y_ref, [&](int64_t i, int64_t j) { return 8 * kU * std::abs(g(i, j)); }, "silu y");
      silu_backward(d_x.view(), d_y.cview(), gate);
      silu_backward_reference(d_x_ref.view(), d_y.cview(), gate);
      // σ·(1 + x·(1 - σ)): 1 - σ carries σ's absolute error, scaled by |x|.
      nn_testing::expect_within(
          d_x, d_x_ref,
          [&](int64_t i, int64_t j) {
            return 16 * kU * std::abs(d_y.at(i, j)) * (1 + std::abs(g(i, j)));
          },
          "silu d_x");

      swiglu_forward(y.view(), gate, up);
      swiglu_forward_reference(y_ref.view(), gate, up);
      nn_testing::expect_within(
          y, y_ref, [&](int64_t i, int64_t j) { return 8 * kU * std::abs(g(i, j) * u(i, j)); },
          "swiglu y");
      Mat d_gate(t, c), d_up(t, c), d_gate_ref(t, c), d_up_ref(t, c);
      swiglu_backward(d_gate.view(), d_up.view(), d_y.cview(), gate, up);
      swiglu_backward_reference(d_gate_ref.view(), d_up_ref.view(), d_y.cview(), gate, up);
      nn_testing::expect_within(
          d_gate, d_gate_ref,
          [&](int64_t i, int64_t j) {
            return 16 * kU * std::abs(d_y.at(i, j) * u(i, j)) * (1 + std::abs(g(i, j)));
          },
          "swiglu d_gate");
      nn_testing::expect_within(
          d_up, d_up_ref,
          [&](int64_t i, int64_t j) { return 8 * kU * std::abs(d_y.at(i, j) * g(i, j)); },
          "swiglu d_up");
      EXPECT_TRUE(fused.intact());
    }
}

TEST(NnActivation, ReferenceGradientsMatchFiniteDifferences) {
  Mat x = Mat(3, 6).randn(21, 2.0f), up = Mat(3, 6).randn(22);
  const Mat r = Mat(3, 6).randn(23);
  for (auto approx : kApprox) {
    auto loss = [&] {
      Mat y(3, 6);
      gelu_forward_reference(y.view(), x.cview(), approx);
      return nn_testing::weighted_sum(y, r);
    };
    Mat d_x(3, 6);
    gelu_backward_reference(d_x.view(), r.cview(), x.cview(), approx);
    nn_testing::GradCheck g;
    g.sweep(loss, x, d_x);
    g.expect_ok(approx == GeluApproximation::kTanh ? "gelu tanh" : "gelu");
  }
  {
    auto loss = [&] {
      Mat y(3, 6);
      silu_forward_reference(y.view(), x.cview());
      return nn_testing::weighted_sum(y, r);
    };
    Mat d_x(3, 6);
    silu_backward_reference(d_x.view(), r.cview(), x.cview());
    nn_testing::GradCheck g;
    g.sweep(loss, x, d_x);
    g.expect_ok("silu");
  }
  auto loss = [&] {
    Mat y(3, 6);
    swiglu_forward_reference(y.view(), x.cview(), up.cview());
    return nn_testing::weighted_sum(y, r);
  };
  Mat d_gate(3, 6), d_up(3, 6);
  swiglu_backward_reference(d_gate.view(), d_up.view(), r.cview(), x.cview(), up.cview());
  nn_testing::GradCheck g;
  g.sweep(loss, x, d_gate);
  g.sweep(loss, up, d_up);
  g.expect_ok("swiglu");
}

TEST(NnActivation, InPlaceMatchesOutOfPlace) {
  const Mat x = spread(5, 37, 31), up = Mat(5, 37).randn(32), d_y = Mat(5, 37).randn(33);
  for (auto approx : kApprox) {
    Mat y(5, 37), inplace = x;
    gelu_forward(y.view(), x.cview(), approx);
    gelu_forward(inplace.view(), inplace.cview(), approx);
    EXPECT_TRUE(nn_testing::bitwise_equal(y, inplace));
  }
  Mat d_gate(5, 37), d_up(5, 37), g2 = x, u2 = up;
  swiglu_backward(d_gate.view(), d_up.view(), d_y.cview(), x.cview(), up.cview());
  swiglu_backward(g2.view(), u2.view(), d_y.cview(), g2.cview(), u2.cview());
  EXPECT_TRUE(nn_testing::bitwise_equal(d_gate, g2));
  EXPECT_TRUE(nn_testing::bitwise_equal(d_up, u2));
}

TEST(NnActivation, RejectsMismatchedShapes) {
  const Mat x(4, 6), up(4, 5);
  Mat y(4, 6);
  expect_error([&] { swiglu_forward(y.view(), x.cview(), up.cview()); },
               "swiglu_forward: up: expected shape [T, C] = [4, 6], got [4, 5]");
}

}  // namespace
}  // namespace attnkit
