// GELU feed-forward block: bitwise the composition of its layers (fast and reference, which is
// what lets BERT, ViT and the deformable encoder call it unchanged), fast vs the reference block on
// tail shapes with and without biases, finite differences of the reference block's loss Σ out·r
// w.r.t. x and every parameter, the gradient contract (+= on parameters, = on d_x, empty views
// skipped), thread-count determinism and argument errors.
#include "attnkit/nn/feed_forward.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/linear.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using nn_testing::GradCheck;
using nn_testing::kU;
using nn_testing::Mat;

using FeedForwardWidths = std::pair<int64_t, int64_t>;  // (C, F)

const GeluApproximation kFeedForwardApprox[] = {GeluApproximation::kNone,
                                                GeluApproximation::kTanh};

// Inputs and parameters of one block, random with O(1) activations (weights ~ N(0, 1/in)).
struct FeedForwardCase {
  int64_t t, c, f;
  Mat x, w1, w2, d_out;
  std::vector<float> b1, b2;
  FeedForwardCase(int64_t t_, int64_t c_, int64_t f_, bool bias, uint32_t seed)
      : t(t_), c(c_), f(f_),
        x(Mat(t, c).randn(seed)),
        w1(Mat(f, c).randn(seed + 1, 1 / std::sqrt(float(c)))),
        w2(Mat(c, f).randn(seed + 2, 1 / std::sqrt(float(f)))),
        d_out(Mat(t, c).randn(seed + 3)),
        b1(bias ? randn(f, seed + 4, 0.5f) : std::vector<float>{}),
        b2(bias ? randn(c, seed + 5, 0.5f) : std::vector<float>{}) {}
  FeedForwardParams params() const { return {w1.cview(), b1, w2.cview(), b2}; }
};

// Everything a forward and backward write; parameter gradients start at `fill` (biases only
// where the case has them).
struct FeedForwardRun {
  Mat out, pre, u, d_x, d_hidden, d_w1, d_w2;
  std::vector<float> d_b1, d_b2;
  FeedForwardRun(const FeedForwardCase& k, float fill)
      : out(k.t, k.c), pre(k.t, k.f), u(k.t, k.f), d_x(Mat(k.t, k.c).randn(99)),
        d_hidden(k.t, k.f), d_w1(k.f, k.c), d_w2(k.c, k.f),
        d_b1(k.b1.size(), fill), d_b2(k.b2.size(), fill) {
    for (Mat* m : {&d_w1, &d_w2})
      for (int64_t i = 0; i < m->rows; ++i)
        for (int64_t j = 0; j < m->cols; ++j) m->at(i, j) = fill;
  }
  FeedForwardCache cache() { return {pre.view(), u.view()}; }
  FeedForwardGrads grads() { return {d_w1.view(), d_b1, d_w2.view(), d_b2}; }
  std::vector<std::pair<std::string, const Mat*>> mats() const {
    return {{"out", &out},  {"pre", &pre},   {"u", &u},
            {"d_x", &d_x},  {"d_w1", &d_w1}, {"d_w2", &d_w2}};
  }
};

FeedForwardRun run_block(const FeedForwardCase& k, bool reference, GeluApproximation approx,
                         float fill = 0.0f) {
  FeedForwardRun r(k, fill);
  (reference ? feed_forward_forward_reference : feed_forward_forward)(
      r.out.view(), r.cache(), k.x.cview(), k.params(), approx);
  (reference ? feed_forward_backward_reference : feed_forward_backward)(
      r.d_x.view(), r.grads(), r.d_hidden.view(), k.d_out.cview(), k.x.cview(), r.cache(),
      k.params(), approx);
  return r;
}

// The three layers called by hand, in the order the models called them before the block existed.
FeedForwardRun run_layers(const FeedForwardCase& k, bool reference, GeluApproximation approx,
                          float fill) {
  FeedForwardRun r(k, fill);
  const auto lin_f = reference ? linear_forward_reference : linear_forward;
  const auto lin_b = reference ? linear_backward_reference : linear_backward;
  lin_f(r.pre.view(), k.x.cview(), k.w1.cview(), k.b1);
  (reference ? gelu_forward_reference : gelu_forward)(r.u.view(), r.pre.cview(), approx);
  lin_f(r.out.view(), r.u.cview(), k.w2.cview(), k.b2);
  lin_b(r.d_hidden.view(), r.d_w2.view(), r.d_b2, k.d_out.cview(), r.u.cview(), k.w2.cview());
  (reference ? gelu_backward_reference : gelu_backward)(r.d_hidden.view(), r.d_hidden.cview(),
                                                        r.pre.cview(), approx);
  lin_b(r.d_x.view(), r.d_w1.view(), r.d_b1, r.d_hidden.cview(), k.x.cview(), k.w1.cview());
  return r;
}

// The block is its layers: every output, the cache, the scratch and the accumulated parameter
// gradients bitwise equal (guard bands and row padding included), fast and reference.
TEST(NnFeedForward, IsBitwiseTheCompositionOfItsLayers) {
  for (bool reference : {false, true})
    for (auto approx : kFeedForwardApprox)
      for (bool bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "reference=" << reference << " tanh="
                                          << (approx == GeluApproximation::kTanh)
                                          << " bias=" << bias);
        const FeedForwardCase k(65, 24, 96, bias, 3);
        const FeedForwardRun block = run_block(k, reference, approx, 0.25f);
        const FeedForwardRun layers = run_layers(k, reference, approx, 0.25f);
        for (size_t i = 0; i < block.mats().size(); ++i) {
          EXPECT_TRUE(nn_testing::bitwise_equal(*block.mats()[i].second, *layers.mats()[i].second))
              << block.mats()[i].first;
          EXPECT_TRUE(block.mats()[i].second->intact()) << block.mats()[i].first;
        }
        EXPECT_TRUE(nn_testing::bitwise_equal(block.d_hidden, layers.d_hidden));
        EXPECT_EQ(block.d_b1, layers.d_b1);
        EXPECT_EQ(block.d_b2, layers.d_b2);
      }
}

double max_abs_of(const Mat& m) {
  double s = 0;
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) s = std::max(s, double(std::abs(m.at(i, j))));
  return s;
}

// Bar (the attention block's, tests/nn/attention_block_test.cpp): every stage is a float32 sum of
// at most n = max(T, C, F) terms, error ~sqrt(n)·2^-24 of its scale each, compounded over the
// three layers; 64·sqrt(n)·2^-24 of the result's scale leaves margin, while a wrong or missing
// term is off by O(0.1) of the scale.
TEST(NnFeedForward, FastMatchesReferenceOnTailShapes) {
  for (auto approx : kFeedForwardApprox)
    for (int64_t t : {1, 7, 65})
      for (auto [c, f] : {FeedForwardWidths{17, 63}, FeedForwardWidths{64, 113}})
        for (bool bias : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "tanh=" << (approx == GeluApproximation::kTanh)
                                            << " T=" << t << " C=" << c << " F=" << f
                                            << " bias=" << bias);
          const FeedForwardCase k(t, c, f, bias, uint32_t(t * 131 + c * 7 + f));
          const FeedForwardRun fast = run_block(k, false, approx), ref = run_block(k, true, approx);
          const double tol = 64 * std::sqrt(double(std::max({t, c, f}))) * kU;
          for (size_t i = 0; i < fast.mats().size(); ++i) {
            const Mat& want = *ref.mats()[i].second;
            const double bar = tol * std::max(1.0, max_abs_of(want));
            nn_testing::expect_within(*fast.mats()[i].second, want,
                                      [&](int64_t, int64_t) { return bar; }, fast.mats()[i].first);
          }
          auto expect_vec = [&](const std::vector<float>& got, const std::vector<float>& want,
                                const char* what) {
            double scale = 1;
            for (float w : want) scale = std::max(scale, double(std::abs(w)));
            nn_testing::expect_within(got, want, [&](size_t) { return tol * scale; }, what);
          };
          expect_vec(fast.d_b1, ref.d_b1, "d_b1");
          expect_vec(fast.d_b2, ref.d_b2, "d_b2");
        }
}

// Finite differences of L = Σ r ⊙ out(reference block) w.r.t. x and every parameter entry
// (T = 3, C = 4, F = 6). Bar: kFiniteDifferenceBar (nn_testing.hpp): GELU is smooth and weights
// ~N(0, 1/in) keep activations O(1).
TEST(NnFeedForward, ReferenceGradientsMatchFiniteDifferences) {
  for (auto approx : kFeedForwardApprox)
    for (bool bias : {false, true}) {
      const std::string name = std::string(approx == GeluApproximation::kTanh ? "tanh" : "exact") +
                               (bias ? " bias" : " no bias");
      FeedForwardCase k(3, 4, 6, bias, 11);
      const FeedForwardRun ref = run_block(k, true, approx);
      Mat out(3, 4), pre(3, 6), u(3, 6);
      auto loss = [&] {
        feed_forward_forward_reference(out.view(), {pre.view(), u.view()}, k.x.cview(), k.params(),
                                       approx);
        return nn_testing::weighted_sum(out, k.d_out);
      };
      auto sweep = [&](auto& param, const auto& grad, const char* what) {
        GradCheck check;
        check.sweep(loss, param, grad);
        check.expect_ok(name + " " + what);
      };
      sweep(k.x, ref.d_x, "d_x");
      sweep(k.w1, ref.d_w1, "d_w1");
      sweep(k.w2, ref.d_w2, "d_w2");
      sweep(k.b1, ref.d_b1, "d_b1");
      sweep(k.b2, ref.d_b2, "d_b2");
    }
}

// Gradient contract: parameter gradients accumulate onto what the buffers held; d_x is assigned
// (run_block pre-fills it with noise).
TEST(NnFeedForward, ParametersAccumulateInputGradientAssigned) {
  for (bool reference : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "reference=" << reference);
    const FeedForwardCase k(7, 17, 40, true, 21);
    const FeedForwardRun zero = run_block(k, reference, GeluApproximation::kNone, 0.0f);
    const FeedForwardRun filled = run_block(k, reference, GeluApproximation::kNone, 0.75f);
    EXPECT_TRUE(nn_testing::bitwise_equal(zero.d_x, filled.d_x));
    for (auto [g0, g1] : {std::pair{&zero.d_w1, &filled.d_w1}, std::pair{&zero.d_w2, &filled.d_w2}})
      for (int64_t r = 0; r < g0->rows; ++r)
        for (int64_t c = 0; c < g0->cols; ++c) {
          const double want = g0->at(r, c) + 0.75;
          ASSERT_NEAR(g1->at(r, c), want, 4 * kU * (std::abs(want) + 0.75));
        }
    for (auto [g0, g1] : {std::pair{&zero.d_b1, &filled.d_b1}, std::pair{&zero.d_b2, &filled.d_b2}})
      for (size_t j = 0; j < g0->size(); ++j)
        ASSERT_NEAR((*g1)[j], (*g0)[j] + 0.75, 4 * kU * (std::abs((*g0)[j]) + 1.5));
  }
}

// Frozen parameters and no input gradient: empty views are skipped, the others unchanged.
TEST(NnFeedForward, EmptyGradientsAreSkipped) {
  const FeedForwardCase k(9, 16, 32, true, 31);
  const FeedForwardRun full = run_block(k, false, GeluApproximation::kTanh);
  FeedForwardRun frozen(k, 0.0f), no_dx(k, 0.0f);
  feed_forward_forward(frozen.out.view(), frozen.cache(), k.x.cview(), k.params(),
                       GeluApproximation::kTanh);
  feed_forward_backward(frozen.d_x.view(), {}, frozen.d_hidden.view(), k.d_out.cview(),
                        k.x.cview(), frozen.cache(), k.params(), GeluApproximation::kTanh);
  EXPECT_TRUE(nn_testing::bitwise_equal(frozen.d_x, full.d_x));
  feed_forward_backward({}, no_dx.grads(), no_dx.d_hidden.view(), k.d_out.cview(), k.x.cview(),
                        frozen.cache(), k.params(), GeluApproximation::kTanh);
  EXPECT_TRUE(nn_testing::bitwise_equal(no_dx.d_w1, full.d_w1));
  EXPECT_TRUE(nn_testing::bitwise_equal(no_dx.d_w2, full.d_w2));
  EXPECT_EQ(no_dx.d_b1, full.d_b1);
  EXPECT_EQ(no_dx.d_b2, full.d_b2);
}

TEST(NnFeedForward, BitwiseIdenticalForAnyThreadCount) {
  const FeedForwardCase k(300, 64, 256, true, 41);
  auto run = [&](int threads) {
    ThreadCountScope scope(threads);
    return run_block(k, false, GeluApproximation::kNone);
  };
  const FeedForwardRun one = run(1), many = run(3);
  for (size_t i = 0; i < one.mats().size(); ++i)
    EXPECT_TRUE(nn_testing::bitwise_equal(*one.mats()[i].second, *many.mats()[i].second))
        << one.mats()[i].first;
  EXPECT_EQ(one.d_b1, many.d_b1);
  EXPECT_EQ(one.d_b2, many.d_b2);
}

TEST(NnFeedForward, RejectsMismatchedShapesNamingTheArgument) {
  const FeedForwardCase k(4, 6, 10, true, 51);
  FeedForwardRun r(k, 0.0f);
  const Mat bad_w2(6, 9);
  expect_error(
      [&] {
        feed_forward_forward(r.out.view(), r.cache(), k.x.cview(),
                             {k.w1.cview(), k.b1, bad_w2.cview(), k.b2}, GeluApproximation::kNone);
      },
      "feed_forward_forward: w2: expected shape [C, F] = [6, 10], got [6, 9]");
  const std::vector<float> short_b1(9);
  expect_error(
      [&] {
        feed_forward_forward_reference(r.out.view(), r.cache(), k.x.cview(),
                                       {k.w1.cview(), short_b1, k.w2.cview(), k.b2},
                                       GeluApproximation::kNone);
      },
      "feed_forward_forward_reference: b1: expected 0 or [F] = 10 elements, got 9");
  Mat short_pre(3, 10);
  expect_error(
      [&] {
        feed_forward_forward(r.out.view(), {short_pre.view(), r.u.view()}, k.x.cview(), k.params(),
                             GeluApproximation::kNone);
      },
      "feed_forward_forward: cache.pre: expected shape [T, F] = [4, 10], got [3, 10]");
  Mat bad_hidden(4, 6);
  expect_error(
      [&] {
        feed_forward_backward(r.d_x.view(), r.grads(), bad_hidden.view(), k.d_out.cview(),
                              k.x.cview(), r.cache(), k.params(), GeluApproximation::kNone);
      },
      "feed_forward_backward: d_hidden: expected shape [T, F] = [4, 10], got [4, 6]");
  Mat bad_dw1(10, 5);
  expect_error(
      [&] {
        feed_forward_backward(r.d_x.view(), {bad_dw1.view(), r.d_b1, r.d_w2.view(), r.d_b2},
                              r.d_hidden.view(), k.d_out.cview(), k.x.cview(), r.cache(),
                              k.params(), GeluApproximation::kNone);
      },
      "feed_forward_backward: grads.w1: expected shape [F, C] = [10, 6], got [10, 5]");
}

}  // namespace
}  // namespace attnkit
