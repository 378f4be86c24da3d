// Dropout: fast vs reference (identical masks, scaling within 2 roundings), the backward
// regenerating the forward's mask, keep rate, independence of seeds and streams, thread-count
// determinism, finite differences of the reference, and p validation.
#include "attnkit/nn/dropout.hpp"

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

Mat ones(int64_t t, int64_t c) {
  Mat m(t, c);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < c; ++j) m.at(i, j) = 1.0f;
  return m;
}

TEST(NnDropout, FastMatchesReferenceAndTheMaskDefinition) {
  for (int64_t t : {1, 7, 65})
    for (int64_t c : {1, 17, 64}) {
      SCOPED_TRACE(::testing::Message() << "T=" << t << " C=" << c);
      const DropoutOptions o{.p = 0.3f, .seed = 1234, .stream = 7};
      const Mat x = ones(t, c), d_y = Mat(t, c).randn(5);
      Mat y(t, c), y_ref(t, c), d_x(t, c), d_x_ref(t, c);
      dropout_forward(y.view(), x.cview(), o);
      dropout_forward_reference(y_ref.view(), x.cview(), o);
      dropout_backward(d_x.view(), d_y.cview(), o);
      dropout_backward_reference(d_x_ref.view(), d_y.cview(), o);
      for (int64_t i = 0; i < t; ++i)
        for (int64_t j = 0; j < c; ++j) {
          const bool keep = dropout_keeps(o, uint64_t(i * c + j));
          ASSERT_EQ(y.at(i, j) != 0.0f, keep) << i << ", " << j;
          ASSERT_EQ(y_ref.at(i, j) != 0.0f, keep) << i << ", " << j;
          // float(1/(1-p))·x vs x/(1-p) rounded once from double: two roundings apart at most.
          ASSERT_NEAR(y.at(i, j), y_ref.at(i, j), 2 * kU * std::abs(y_ref.at(i, j)));
          ASSERT_EQ(d_x.at(i, j) != 0.0f || d_y.at(i, j) == 0.0f, keep);  // forward's mask
          ASSERT_NEAR(d_x.at(i, j), d_x_ref.at(i, j), 2 * kU * std::abs(d_x_ref.at(i, j)));
        }
      EXPECT_TRUE(y.intact() && d_x.intact());
    }
}

TEST(NnDropout, KeepRateSeedsStreamsAndThreads) {
  const int64_t t = 400, c = 250;  // 1e5 elements
  const Mat x = ones(t, c);
  auto run = [&](DropoutOptions o, int threads) {
    ThreadCountScope scope(threads);
    Mat y(t, c);
    dropout_forward(y.view(), x.cview(), o);
    return y;
  };
  const DropoutOptions o{.p = 0.25f, .seed = 99, .stream = 0};
  const Mat a = run(o, 1);
  EXPECT_TRUE(nn_testing::bitwise_equal(a, run(o, 3)));
  int64_t kept = 0;
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < c; ++j) {
      kept += a.at(i, j) != 0.0f;
      if (a.at(i, j) != 0.0f) {
        ASSERT_EQ(a.at(i, j), float(1.0 / 0.75));
      }
    }
  // Binomial(1e5, 0.75): standard deviation 137; 6 sigma is ~800.
  EXPECT_NEAR(double(kept), 0.75 * double(t * c), 6 * std::sqrt(0.25 * 0.75 * double(t * c)));
  // Other stream or seed: about p·(1-p)·2 = 37.5 % of the decisions differ.
  for (const DropoutOptions other : {DropoutOptions{.p = 0.25f, .seed = 99, .stream = 1},
                                     DropoutOptions{.p = 0.25f, .seed = 100, .stream = 0}}) {
    const Mat b = run(other, 2);
    int64_t differ = 0;
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < c; ++j) differ += (a.at(i, j) != 0.0f) != (b.at(i, j) != 0.0f);
    EXPECT_NEAR(double(differ) / double(t * c), 0.375, 0.01);
  }
  const Mat identity = run({.p = 0.0f, .seed = 5}, 2);
  EXPECT_TRUE(nn_testing::bitwise_equal(identity, x));
}

TEST(NnDropout, ReferenceGradientMatchesFiniteDifferences) {
  const DropoutOptions o{.p = 0.5f, .seed = 3, .stream = 2};
  Mat x = Mat(4, 5).randn(6);
  const Mat r = Mat(4, 5).randn(7);
  auto loss = [&] {
    Mat y(4, 5);
    dropout_forward_reference(y.view(), x.cview(), o);
    return nn_testing::weighted_sum(y, r);
  };
  Mat d_x(4, 5);
  dropout_backward_reference(d_x.view(), r.cview(), o);
  nn_testing::GradCheck g;
  g.sweep(loss, x, d_x);
  g.expect_ok("dropout");
}

TEST(NnDropout, RejectsProbabilityOutsideZeroOne) {
  const Mat x(2, 3);
  Mat y(2, 3);
  for (float p : {1.0f, -0.1f, NAN}) {
    expect_error([&] { dropout_forward(y.view(), x.cview(), {.p = p}); },
                 "dropout_forward: p: expected a value in [0, 1)");
  }
}

}  // namespace
}  // namespace attnkit
