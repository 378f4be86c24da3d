// LayerNorm and RMSNorm: fast vs reference (bars from the float roundings on each element's
// path, with magnitudes computed in double), reference gradients by finite differences, in-place
// use, optional affine parameters, thread-count determinism and argument errors.
#include "attnkit/nn/norm.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using nn_testing::kU;
using nn_testing::Mat;

constexpr float kEps = 1e-5f;

// Inputs with a non-zero mean (exercises the centring) and weights around 1.
struct NormCase {
  Mat x, d_y;
  std::vector<float> w, b;
  NormCase(int64_t t, int64_t c, uint32_t seed)
      : x(Mat(t, c).randn(seed)),
        d_y(Mat(t, c).randn(seed + 1)),
        w(randn(c, seed + 2, 0.5f)),
        b(randn(c, seed + 3)) {
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < c; ++j) x.at(i, j) += 0.5f;
    for (auto& v : w) v += 1.0f;
  }
};

TEST(NnLayerNorm, FastMatchesReferenceOnTailShapes) {
  for (int64_t t : {1, 7, 65})
    for (int64_t c : {1, 17, 64}) {
      SCOPED_TRACE(::testing::Message() << "T=" << t << " C=" << c);
      NormCase n(t, c, uint32_t(t * 3 + c));
      std::vector<float> mean(static_cast<size_t>(t)), rstd(static_cast<size_t>(t)),
          mean_ref(static_cast<size_t>(t)), rstd_ref(static_cast<size_t>(t));
      Mat y(t, c), y_ref(t, c);
      layer_norm_forward(y.view(), mean, rstd, n.x.cview(), n.w, n.b, kEps);
      layer_norm_forward_reference(y_ref.view(), mean_ref, rstd_ref, n.x.cview(), n.w, n.b, kEps);
      // Statistics: double sums rounded once to float (the orders differ: 1e-12 absolute slack).
      nn_testing::expect_within(
          mean, mean_ref, [&](size_t i) { return 2 * kU * std::abs(mean_ref[i]) + 1e-12; }, "mean");
      nn_testing::expect_within(
          rstd, rstd_ref, [&](size_t i) { return 2 * kU * rstd_ref[i]; }, "rstd");
      auto xhat = [&](int64_t i, int64_t j) {
        return (double(n.x.at(i, j)) - mean_ref[size_t(i)]) * rstd_ref[size_t(i)];
      };
      // y = (x - m)·r·w + b: about five roundings of |x̂·w| + |b|, plus m's rounding scaled by r·w.
      nn_testing::expect_within(
          y, y_ref,
          [&](int64_t i, int64_t j) {
            const double aw = std::abs(n.w[size_t(j)]);
            return 8 * kU *
                   (std::abs(xhat(i, j)) * aw + std::abs(n.b[size_t(j)]) +
                    rstd_ref[size_t(i)] * std::abs(mean_ref[size_t(i)]) * aw);
          },
          "y");

      Mat d_x(t, c), d_x_ref(t, c);
      std::vector<float> d_w = randn(c, 7), d_b = randn(c, 8);
      std::vector<float> d_w_ref = d_w, d_b_ref = d_b;
      layer_norm_backward(d_x.view(), d_w, d_b, n.d_y.cview(), n.x.cview(), n.w, mean, rstd);
      layer_norm_backward_reference(d_x_ref.view(), d_w_ref, d_b_ref, n.d_y.cview(), n.x.cview(),
                                    n.w, mean, rstd);
      // d_x = r·(g - mean(g) - x̂·mean(g·x̂)), g = d_y·w: ~8 roundings of each term's size (x16).
      std::vector<double> abs_a(static_cast<size_t>(t)), abs_bb(static_cast<size_t>(t));
      for (int64_t i = 0; i < t; ++i) {
        double a = 0, bb = 0;
        for (int64_t j = 0; j < c; ++j) {
          const double g = double(n.d_y.at(i, j)) * n.w[size_t(j)];
          a += g / double(c);
          bb += g * xhat(i, j) / double(c);
        }
        abs_a[size_t(i)] = std::abs(a);
        abs_bb[size_t(i)] = std::abs(bb);
      }
      nn_testing::expect_within(
          d_x, d_x_ref,
          [&](int64_t i, int64_t j) {
            const double r = rstd_ref[size_t(i)];
            const double g = std::abs(double(n.d_y.at(i, j)) * n.w[size_t(j)]);
            return 16 * kU * r *
                   (g + abs_a[size_t(i)] +
                    (std::abs(xhat(i, j)) + r * std::abs(mean_ref[size_t(i)])) * abs_bb[size_t(i)]);
          },
          "d_x");
      // d_w: terms d_y·x̂ with x̂ rounded in float (~3 roundings and m's), summed in double.
      const auto d_w0 = randn(c, 7), d_b0 = randn(c, 8);
      nn_testing::expect_within(
          d_w, d_w_ref,
          [&](size_t j) {
            double m = std::abs(d_w0[j]);
            for (int64_t i = 0; i < t; ++i)
              m += std::abs(n.d_y.at(i, int64_t(j))) *
                   (std::abs(xhat(i, int64_t(j))) +
                    rstd_ref[size_t(i)] * std::abs(mean_ref[size_t(i)]));
            return 8 * kU * m;
          },
          "d_w");
      nn_testing::expect_within(
          d_b, d_b_ref,
          [&](size_t j) {
            double m = std::abs(d_b0[j]);
            for (int64_t i = 0; i < t; ++i) m += std::abs(n.d_y.at(i, int64_t(j)));
            return 3 * kU * m;
          },
          "d_b");
    }
}

TEST(NnRmsNorm, FastMatchesReferenceOnTailShapes) {
  for (int64_t t : {1, 7, 65})
    for (int64_t c : {1, 17, 64}) {
      SCOPED_TRACE(::testing::Message() << "T=" << t << " C=" << c);
      NormCase n(t, c, uint32_t(t * 5 + c));
      std::vector<float> rstd(static_cast<size_t>(t)), rstd_ref(static_cast<size_t>(t));
      Mat y(t, c), y_ref(t, c);
      rms_norm_forward(y.view(), rstd, n.x.cview(), n.w, kEps);
      rms_norm_forward_reference(y_ref.view(), rstd_ref, n.x.cview(), n.w, kEps);
      nn_testing::expect_within(
          rstd, rstd_ref, [&](size_t i) { return 2 * kU * rstd_ref[i]; }, "rstd");
      // y = x·r·w: r's rounding and two products (x2 margin).
      nn_testing::expect_within(
          y, y_ref,
          [&](int64_t i, int64_t j) {
            return 8 * kU * std::abs(double(n.x.at(i, j)) * rstd_ref[size_t(i)] * n.w[size_t(j)]);
          },
          "y");
      Mat d_x(t, c), d_x_ref(t, c);
      const auto d_w0 = randn(c, 7);
      std::vector<float> d_w = d_w0, d_w_ref = d_w0;
      rms_norm_backward(d_x.view(), d_w, n.d_y.cview(), n.x.cview(), n.w, rstd);
      rms_norm_backward_reference(d_x_ref.view(), d_w_ref, n.d_y.cview(), n.x.cview(), n.w, rstd);
      // d_x = r·(g - x·k), k = r²·mean(g·x): ~6 roundings of each term (x16 with margin).
      nn_testing::expect_within(
          d_x, d_x_ref,
          [&](int64_t i, int64_t j) {
            const double r = rstd_ref[size_t(i)];
            double k = 0;
            for (int64_t jj = 0; jj < c; ++jj)
              k += std::abs(double(n.d_y.at(i, jj)) * n.w[size_t(jj)] * n.x.at(i, jj));
            k = k / double(c) * r * r;
            return 16 * kU * r *
                   (std::abs(double(n.d_y.at(i, j)) * n.w[size_t(j)]) + std::abs(n.x.at(i, j)) * k);
          },
          "d_x");
      nn_testing::expect_within(
          d_w, d_w_ref,
          [&](size_t j) {
            double m = std::abs(d_w0[j]);
            for (int64_t i = 0; i < t; ++i)
              m += std::abs(double(n.d_y.at(i, int64_t(j))) * n.x.at(i, int64_t(j))) *
                   rstd_ref[size_t(i)];
            return 8 * kU * m;
          },
          "d_w");
    }
}

TEST(NnLayerNorm, ReferenceGradientsMatchFiniteDifferences) {
  for (bool affine : {true, false}) {
    NormCase n(3, 5, 51);
    if (!affine) n.w.clear(), n.b.clear();
    const Mat r = Mat(3, 5).randn(52);
    auto forward = [&](std::vector<float>& mean, std::vector<float>& rstd) {
      Mat y(3, 5);
      layer_norm_forward_reference(y.view(), mean, rstd, n.x.cview(), n.w, n.b, kEps);
      return nn_testing::weighted_sum(y, r);
    };
    std::vector<float> mean(3), rstd(3);
    auto loss = [&] { return forward(mean, rstd); };
    forward(mean, rstd);
    Mat d_x(3, 5);
    std::vector<float> d_w(n.w.size(), 0.0f), d_b(n.b.size(), 0.0f);
    layer_norm_backward_reference(d_x.view(), d_w, d_b, r.cview(), n.x.cview(), n.w, mean, rstd);
    const std::vector<float> saved_mean = mean, saved_rstd = rstd;
    nn_testing::GradCheck g;
    g.sweep(loss, n.x, d_x);
    g.sweep(loss, n.w, d_w);
    g.sweep(loss, n.b, d_b);
    g.expect_ok(affine ? "layer_norm" : "layer_norm without affine");
  }
}

TEST(NnRmsNorm, ReferenceGradientsMatchFiniteDifferences) {
  NormCase n(3, 5, 61);
  const Mat r = Mat(3, 5).randn(62);
  std::vector<float> rstd(3);
  auto loss = [&] {
    Mat y(3, 5);
    rms_norm_forward_reference(y.view(), rstd, n.x.cview(), n.w, kEps);
    return nn_testing::weighted_sum(y, r);
  };
  loss();
  Mat d_x(3, 5);
  std::vector<float> d_w(5, 0.0f);
  rms_norm_backward_reference(d_x.view(), d_w, r.cview(), n.x.cview(), n.w, rstd);
  nn_testing::GradCheck g;
  g.sweep(loss, n.x, d_x);
  g.sweep(loss, n.w, d_w);
  g.expect_ok("rms_norm");
}

TEST(NnLayerNorm, InPlaceAndUnitAffineMatchOutOfPlace) {
  NormCase n(9, 33, 71);
  std::vector<float> mean(9), rstd(9), ones(33, 1.0f), zeros(33, 0.0f);
  Mat y(9, 33), y_plain(9, 33);
  layer_norm_forward(y.view(), mean, rstd, n.x.cview(), ones, zeros, kEps);
  layer_norm_forward(y_plain.view(), mean, rstd, n.x.cview(), {}, {}, kEps);  // no affine
  Mat inplace = n.x;
  layer_norm_forward(inplace.view(), mean, rstd, inplace.cview(), ones, zeros, kEps);
  EXPECT_TRUE(nn_testing::bitwise_equal(y, y_plain));
  EXPECT_TRUE(nn_testing::bitwise_equal(y, inplace));
  // d_x may alias d_y: parameter gradients are formed before d_x overwrites it.
  Mat d_x(9, 33), shared = n.d_y;
  std::vector<float> d_w(33, 0.0f), d_b(33, 0.0f), d_w2(33, 0.0f), d_b2(33, 0.0f);
  layer_norm_backward(d_x.view(), d_w, d_b, n.d_y.cview(), n.x.cview(), n.w, mean, rstd);
  layer_norm_backward(shared.view(), d_w2, d_b2, shared.cview(), n.x.cview(), n.w, mean, rstd);
  EXPECT_TRUE(nn_testing::bitwise_equal(d_x, shared));
  EXPECT_EQ(d_w, d_w2);
  EXPECT_EQ(d_b, d_b2);
}

TEST(NnNorm, ParameterGradientsAreBitwiseIdenticalForAnyThreadCount) {
  NormCase n(400, 150, 81);  // several row blocks and channel blocks
  std::vector<float> mean(400), rstd(400);
  Mat y(400, 150);
  layer_norm_forward(y.view(), mean, rstd, n.x.cview(), n.w, n.b, kEps);
  auto run = [&](int threads) {
    ThreadCountScope scope(threads);
    Mat d_x(400, 150), d_x_rms(400, 150);
    std::vector<float> d_w(150, 0.0f), d_b(150, 0.0f), d_w_rms(150, 0.0f);
    layer_norm_backward(d_x.view(), d_w, d_b, n.d_y.cview(), n.x.cview(), n.w, mean, rstd);
    rms_norm_backward(d_x_rms.view(), d_w_rms, n.d_y.cview(), n.x.cview(), n.w, rstd);
    return std::make_tuple(d_x, d_w, d_b, d_x_rms, d_w_rms);
  };
  const auto a = run(1), b = run(3);
  EXPECT_TRUE(nn_testing::bitwise_equal(std::get<0>(a), std::get<0>(b)));
  EXPECT_EQ(std::get<1>(a), std::get<1>(b));
  EXPECT_EQ(std::get<2>(a), std::get<2>(b));
  EXPECT_TRUE(nn_testing::bitwise_equal(std::get<3>(a), std::get<3>(b)));
  EXPECT_EQ(std::get<4>(a), std::get<4>(b));
}

TEST(NnLayerNorm, ChunkedParameterGradientsAreIdenticalForAnyThreadCount) {
  NormCase n(2600, 24, 83);  // many tokens, few channels: the token-chunked parameter pass
  std::vector<float> mean(2600), rstd(2600);
  Mat y(2600, 24);
  layer_norm_forward(y.view(), mean, rstd, n.x.cview(), n.w, n.b, kEps);
  auto run = [&](int threads) {
    ThreadCountScope scope(threads);
    Mat d_x(2600, 24);
    std::vector<float> d_w(24, 0.25f), d_b(24, -0.5f);
    layer_norm_backward(d_x.view(), d_w, d_b, n.d_y.cview(), n.x.cview(), n.w, mean, rstd);
    return std::make_tuple(d_x, d_w, d_b);
  };
  const auto a = run(1), b = run(3);
  EXPECT_TRUE(nn_testing::bitwise_equal(std::get<0>(a), std::get<0>(b)));
  EXPECT_EQ(std::get<1>(a), std::get<1>(b));
  EXPECT_EQ(std::get<2>(a), std::get<2>(b));
  // Against the reference, with the tail-shape test's bars: d_w terms d_y·x̂ (x̂ rounded in
  // float) summed in double, d_b summed in double; each added once to its prior value.
  Mat d_x_ref(2600, 24);
  std::vector<float> d_w_ref(24, 0.25f), d_b_ref(24, -0.5f);
  layer_norm_backward_reference(d_x_ref.view(), d_w_ref, d_b_ref, n.d_y.cview(), n.x.cview(), n.w,
                                mean, rstd);
  for (size_t j = 0; j < 24; ++j) {
    double mw = 0.25, mb = 0.5;
    for (int64_t i = 0; i < 2600; ++i) {
      const double g = std::abs(n.d_y.at(i, int64_t(j)));
      const double xh = std::abs((double(n.x.at(i, int64_t(j))) - mean[size_t(i)]) * rstd[size_t(i)]);
      mw += g * (xh + rstd[size_t(i)] * std::abs(mean[size_t(i)]));
      mb += g;
    }
    EXPECT_NEAR(std::get<1>(a)[j], d_w_ref[j], 8 * kU * mw) << "d_w[" << j << "]";
    EXPECT_NEAR(std::get<2>(a)[j], d_b_ref[j], 3 * kU * mb) << "d_b[" << j << "]";
  }
}

// d_residual: d_x = d_residual + the norm's input gradient, in both paths; d_x may alias it.
TEST(NnNorm, ResidualGradientIsAddedToTheInputGradient) {
  for (int64_t c : {17, 64}) {
    SCOPED_TRACE(::testing::Message() << "C=" << c);
    NormCase n(33, c, uint32_t(95 + c));
    const Mat res = Mat(33, c).randn(uint32_t(96 + c));
    std::vector<float> mean(33), rstd(33), rstd_rms(33);
    Mat y(33, c);
    layer_norm_forward(y.view(), mean, rstd, n.x.cview(), n.w, n.b, kEps);
    rms_norm_forward(y.view(), rstd_rms, n.x.cview(), n.w, kEps);
    // Each pair: the plain d_x and the one with d_residual, for one norm and one path.
    auto run = [&](bool rms, bool reference, ConstView2 d_residual, Mat& d_x) {
      std::vector<float> d_w(size_t(c), 0.0f), d_b(size_t(c), 0.0f);
      if (rms)
        (reference ? rms_norm_backward_reference : rms_norm_backward)(
            d_x.view(), d_w, n.d_y.cview(), n.x.cview(), n.w, rstd_rms, d_residual);
      else
        (reference ? layer_norm_backward_reference : layer_norm_backward)(
            d_x.view(), d_w, d_b, n.d_y.cview(), n.x.cview(), n.w, mean, rstd, d_residual);
      return std::make_pair(d_w, d_b);
    };
    for (bool rms : {false, true})
      for (bool reference : {false, true}) {
        SCOPED_TRACE(::testing::Message() << (rms ? "rms_norm" : "layer_norm")
                                          << (reference ? " reference" : " fast"));
        Mat plain(33, c), with(33, c), aliased = res;
        const auto grads_plain = run(rms, reference, {}, plain);
        const auto grads_with = run(rms, reference, res.cview(), with);
        run(rms, reference, aliased.cview(), aliased);  // d_x and d_residual share memory
        // Against plain + res rounded once: the sum's own rounding on each side and, where the
        // compiler fuses it into an FMA or the reference rounds once, the plain d_x's rounding.
        Mat want(33, c);
        for (int64_t i = 0; i < 33; ++i)
          for (int64_t j = 0; j < c; ++j) want.at(i, j) = plain.at(i, j) + res.at(i, j);
        nn_testing::expect_within(
            with, want,
            [&](int64_t i, int64_t j) { return 3 * kU * (std::abs(plain.at(i, j)) + std::abs(res.at(i, j))); },
            "d_x with d_residual");
        EXPECT_TRUE(nn_testing::bitwise_equal(with, aliased));
        EXPECT_EQ(grads_with, grads_plain);  // parameter gradients do not see d_residual
      }
  }
  Mat d_x(33, 17), wrong(32, 17);
  NormCase n(33, 17, 99);
  std::vector<float> mean(33), rstd(33), d_w(17), d_b(17);
  expect_error([&] { rms_norm_backward(d_x.view(), d_w, n.d_y.cview(), n.x.cview(), n.w, rstd, wrong.cview()); },
               "rms_norm_backward: d_residual");
  expect_error([&] { rms_norm_backward_reference(d_x.view(), d_w, n.d_y.cview(), n.x.cview(), n.w, rstd,
                                                 wrong.cview()); },
               "rms_norm_backward_reference: d_residual");
  expect_error([&] { layer_norm_backward(d_x.view(), d_w, d_b, n.d_y.cview(), n.x.cview(), n.w, mean, rstd,
                                         wrong.cview()); },
               "layer_norm_backward: d_residual");
  expect_error([&] { layer_norm_backward_reference(d_x.view(), d_w, d_b, n.d_y.cview(), n.x.cview(), n.w, mean,
                                                   rstd, wrong.cview()); },
               "layer_norm_backward_reference: d_residual");
}

// d_x may alias d_y while d_residual is given (each row's sums are formed before d_x is written).
TEST(NnNorm, ResidualWithInPlaceGradientMatchesOutOfPlace) {
  NormCase n(40, 33, 101);
  const Mat res = Mat(40, 33).randn(102);
  std::vector<float> mean(40), rstd(40), rstd_rms(40);
  Mat y(40, 33);
  layer_norm_forward(y.view(), mean, rstd, n.x.cview(), n.w, n.b, kEps);
  rms_norm_forward(y.view(), rstd_rms, n.x.cview(), n.w, kEps);
  for (bool rms : {false, true}) {
    SCOPED_TRACE(rms ? "rms_norm" : "layer_norm");
    Mat out(40, 33), shared = n.d_y;
    std::vector<float> d_w(33, 0.0f), d_b(33, 0.0f), d_w2(33, 0.0f), d_b2(33, 0.0f);
    if (rms) {
      rms_norm_backward(out.view(), d_w, n.d_y.cview(), n.x.cview(), n.w, rstd_rms, res.cview());
      rms_norm_backward(shared.view(), d_w2, shared.cview(), n.x.cview(), n.w, rstd_rms, res.cview());
    } else {
      layer_norm_backward(out.view(), d_w, d_b, n.d_y.cview(), n.x.cview(), n.w, mean, rstd, res.cview());
      layer_norm_backward(shared.view(), d_w2, d_b2, shared.cview(), n.x.cview(), n.w, mean, rstd, res.cview());
    }
    EXPECT_TRUE(nn_testing::bitwise_equal(out, shared));
    EXPECT_EQ(d_w, d_w2);
    EXPECT_EQ(d_b, d_b2);
  }
}

TEST(NnNorm, RejectsBadArgumentsNamingThem) {
  NormCase n(4, 6, 91);
  Mat y(4, 6);
  std::vector<float> mean(4), rstd(3);
  expect_error([&] { layer_norm_forward(y.view(), mean, rstd, n.x.cview(), n.w, n.b, kEps); },
               "layer_norm_forward: rstd: expected [T] = 4 elements, got 3");
  std::vector<float> rstd4(4), short_w(5);
  EXPECT_THROW(rms_norm_forward(y.view(), rstd4, n.x.cview(), short_w, kEps), Error);
  EXPECT_THROW(rms_norm_forward(y.view(), rstd4, n.x.cview(), n.w, -1.0f), Error);
  std::vector<float> d_w(6);
  Mat d_x(4, 6);
  EXPECT_THROW(rms_norm_backward(d_x.view(), d_w, n.d_y.cview(), n.x.cview(), {}, rstd4), Error);
}

}  // namespace
}  // namespace attnkit
