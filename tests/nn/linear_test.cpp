// Linear layer: fast path vs reference on tail shapes (worst-case float-sum bars), gradients of
// the reference by finite differences, the += / = contract, thread-count determinism and errors.
#include "attnkit/nn/linear.hpp"

#include <gtest/gtest.h>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/gemm_onednn.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using nn_testing::kU;
using nn_testing::Mat;

struct LinearCase {
  Mat x, w, d_y;
  std::vector<float> b;
  LinearCase(int64_t t, int64_t in, int64_t out, bool bias, uint32_t seed)
      : x(Mat(t, in).randn(seed)),
        w(Mat(out, in).randn(seed + 1)),
        d_y(Mat(t, out).randn(seed + 2)),
        b(bias ? randn(out, seed + 3) : std::vector<float>{}) {}
};

// Fast path against the reference for one shape (worst-case float-sum bars).
void expect_matches_reference(int64_t t, int64_t in, int64_t out, bool bias) {
  SCOPED_TRACE(::testing::Message() << "T=" << t << " in=" << in << " out=" << out << " bias=" << bias);
  LinearCase c(t, in, out, bias, uint32_t(t * 131 + in * 7 + out));
  Mat y(t, out), y_ref(t, out), mag(t, out);
  linear_forward(y.view(), c.x.cview(), c.w.cview(), c.b);
  linear_forward_reference(y_ref.view(), c.x.cview(), c.w.cview(), c.b);
  const Mat ax = c.x.abs(), aw = c.w.abs();
  const auto ab = nn_testing::abs_vec(c.b);
  linear_forward_reference(mag.view(), ax.cview(), aw.cview(), ab);
  // An in-term float dot product plus the bias: at most (in + 2) roundings per term.
  nn_testing::expect_within(
      y, y_ref, [&](int64_t i, int64_t j) { return double(in + 2) * kU * mag.at(i, j); },
      "y");

  // Backward into non-zero parameter gradients: checks += (and d_x's =, by pre-filling it).
  Mat d_x(t, in), d_x_ref(t, in), d_w = Mat(out, in).randn(5), d_w_ref = d_w;
  d_x.randn(9);
  std::vector<float> d_b = bias ? randn(out, 6) : std::vector<float>{};
  std::vector<float> d_b_ref = d_b;
  linear_backward(d_x.view(), d_w.view(), d_b, c.d_y.cview(), c.x.cview(), c.w.cview());
  linear_backward_reference(d_x_ref.view(), d_w_ref.view(), d_b_ref, c.d_y.cview(),
                            c.x.cview(), c.w.cview());
  Mat m_dx(t, in), m_dw = Mat(out, in).randn(5).abs();
  std::vector<float> m_db =
      nn_testing::abs_vec(bias ? randn(out, 6) : std::vector<float>{});
  const Mat ady = c.d_y.abs();
  linear_backward_reference(m_dx.view(), m_dw.view(), m_db, ady.cview(), ax.cview(),
                            aw.cview());
  nn_testing::expect_within(
      d_x, d_x_ref,
      [&](int64_t i, int64_t j) { return double(out + 2) * kU * m_dx.at(i, j); }, "d_x");
  nn_testing::expect_within(
      d_w, d_w_ref,
      [&](int64_t i, int64_t j) { return double(t + 3) * kU * m_dw.at(i, j); }, "d_w");
  // d_b is summed in double and rounded once, then added to the prior value.
  nn_testing::expect_within(
      d_b, d_b_ref, [&](size_t i) { return 3 * kU * m_db[i]; }, "d_b");
}

TEST(NnLinear, FastMatchesReferenceOnTailShapes) {
  for (int64_t t : {1, 7, 65, 1100})  // 1100: weight gradients split the tokens into chunks
    for (int64_t in : {1, 17, 64})
      for (int64_t out : {1, 17, 64})
        for (bool bias : {false, true}) expect_matches_reference(t, in, out, bias);
}

// Products of >= 2^24 multiply-adds in fewer than 4 tiles are split further (parallel_sgemm):
// y [512, 64] into 4 row tiles, d_w [64, 600] (512 tokens: one chunk, so the tiled path) into
// 4 column tiles; d_x [512, 600] into 2 × 2 equal tiles. Same bars; bitwise for 1 and 2 threads.
TEST(NnLinear, LongProductsInEvenTilesMatchReferenceAndThreadCounts) {
  expect_matches_reference(512, 600, 64, true);
  LinearCase c(512, 600, 64, true, 17);
  Mat y[2] = {Mat(512, 64), Mat(512, 64)}, d_x[2] = {Mat(512, 600), Mat(512, 600)};
  Mat d_w[2] = {Mat(64, 600), Mat(64, 600)};
  for (int threads : {1, 2}) {
    ThreadCountScope scope(threads);
    const int i = threads - 1;
    std::vector<float> d_b(64, 0.0f);
    linear_forward(y[i].view(), c.x.cview(), c.w.cview(), c.b);
    linear_backward(d_x[i].view(), d_w[i].view(), d_b, c.d_y.cview(), c.x.cview(), c.w.cview());
  }
  EXPECT_TRUE(y[0].raw == y[1].raw);
  EXPECT_TRUE(d_x[0].raw == d_x[1].raw);
  EXPECT_TRUE(d_w[0].raw == d_w[1].raw);
}

// Shapes where y and d_x run on the packed GEMM (T >= 128, in and out >= 32), with the packed path
// (and sgemm's oneDNN path) on and off: the same bars on both, and bitwise the same for 1 and 2 threads on the packed path.
TEST(NnLinear, PackedAndBlasPathsMatchReference) {
  for (bool packed : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "packed " << packed);
    const PackedGemmScope scope(packed);
    const SgemmPathScope sgemm_path(packed ? SgemmPath::kAuto : SgemmPath::kOpenBlas);  // d_W on oneDNN (ops/gemm_onednn.hpp) or OpenBLAS
    expect_matches_reference(128, 32, 32, false);
    expect_matches_reference(257, 65, 113, true);
    expect_matches_reference(1100, 64, 17, true);  // chunked d_W
  }
  const PackedGemmScope on(true);
  LinearCase c(1037, 48, 80, true, 23);  // 5 row tiles: 4 of 208 rows and a 205-row tail
  Mat y[2] = {Mat(1037, 80), Mat(1037, 80)}, d_x[2] = {Mat(1037, 48), Mat(1037, 48)};
  for (int threads : {1, 2}) {
    ThreadCountScope scope(threads);
    linear_forward(y[threads - 1].view(), c.x.cview(), c.w.cview(), c.b);
    linear_backward(d_x[threads - 1].view(), {}, {}, c.d_y.cview(), c.x.cview(), c.w.cview());
  }
  EXPECT_TRUE(y[0].raw == y[1].raw);
  EXPECT_TRUE(d_x[0].raw == d_x[1].raw);
}

TEST(NnLinear, ReferenceGradientsMatchFiniteDifferences) {
  for (bool bias : {false, true}) {
    LinearCase c(3, 5, 4, bias, 11);
    const Mat r = Mat(3, 4).randn(12);
    auto loss = [&] {
      Mat y(3, 4);
      linear_forward_reference(y.view(), c.x.cview(), c.w.cview(), c.b);
      return nn_testing::weighted_sum(y, r);
    };
    Mat d_x(3, 5), d_w(4, 5);
    std::vector<float> d_b(bias ? 4 : 0, 0.0f);
    linear_backward_reference(d_x.view(), d_w.view(), d_b, r.cview(), c.x.cview(), c.w.cview());
    nn_testing::GradCheck g;
    g.sweep(loss, c.x, d_x);
    g.sweep(loss, c.w, d_w);
    g.sweep(loss, c.b, d_b);
    g.expect_ok(bias ? "linear with bias" : "linear");
  }
}

TEST(NnLinear, OptionalGradientsAreSkipped) {
  LinearCase c(4, 6, 5, true, 21);
  Mat d_w(5, 6);
  std::vector<float> d_b(5, 0.0f);
  linear_backward({}, d_w.view(), d_b, c.d_y.cview(), c.x.cview(), c.w.cview());  // no d_x
  Mat d_x(4, 6);
  linear_backward(d_x.view(), {}, {}, c.d_y.cview(), c.x.cview(), c.w.cview());  // frozen W, b
  Mat d_x_ref(4, 6), d_w_ref(5, 6);
  std::vector<float> d_b_ref(5, 0.0f);
  linear_backward_reference(d_x_ref.view(), d_w_ref.view(), d_b_ref, c.d_y.cview(), c.x.cview(),
                            c.w.cview());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j) EXPECT_NEAR(d_x.at(i, j), d_x_ref.at(i, j), 1e-5);
  for (int64_t i = 0; i < 5; ++i) EXPECT_NEAR(d_b[size_t(i)], d_b_ref[size_t(i)], 1e-5);
}

TEST(NnLinear, BitwiseIdenticalForAnyThreadCount) {
  // Several GEMM tiles in every dimension (tiles are 256 x 512) and several bias column blocks.
  LinearCase c(300, 130, 600, true, 31);
  auto run = [&](int threads) {
    ThreadCountScope scope(threads);
    Mat y(300, 600), d_x(300, 130), d_w(600, 130);
    std::vector<float> d_b(600, 0.0f);
    linear_forward(y.view(), c.x.cview(), c.w.cview(), c.b);
    linear_backward(d_x.view(), d_w.view(), d_b, c.d_y.cview(), c.x.cview(), c.w.cview());
    return std::make_tuple(y, d_x, d_w, d_b);
  };
  const auto one = run(1), many = run(3);
  EXPECT_TRUE(nn_testing::bitwise_equal(std::get<0>(one), std::get<0>(many)));
  EXPECT_TRUE(nn_testing::bitwise_equal(std::get<1>(one), std::get<1>(many)));
  EXPECT_TRUE(nn_testing::bitwise_equal(std::get<2>(one), std::get<2>(many)));
  EXPECT_EQ(std::get<3>(one), std::get<3>(many));
}

TEST(NnLinear, ChunkedWeightGradientIsIdenticalForAnyThreadCount) {
  // A small d_w over many tokens: the token sum is split into fixed chunks run in parallel.
  LinearCase c(2600, 40, 24, true, 41);
  auto run = [&](int threads) {
    ThreadCountScope scope(threads);
    Mat d_w(24, 40);
    std::vector<float> d_b(24, 0.5f);
    linear_backward({}, d_w.view(), d_b, c.d_y.cview(), c.x.cview(), c.w.cview());
    return std::make_pair(d_w, d_b);
  };
  const auto one = run(1), many = run(3);
  EXPECT_TRUE(nn_testing::bitwise_equal(one.first, many.first));
  EXPECT_EQ(one.second, many.second);
}

TEST(NnLinear, RejectsMismatchedShapesNamingTheArgument) {
  LinearCase c(4, 6, 5, true, 41);
  Mat y(4, 5), bad_w(5, 7);
  expect_error([&] { linear_forward(y.view(), c.x.cview(), bad_w.cview(), c.b); },
               "linear_forward: w: expected shape [out, in] = [5, 6], got [5, 7]");
  std::vector<float> short_b(4);
  EXPECT_THROW(linear_forward(y.view(), c.x.cview(), c.w.cview(), short_b), Error);
  Mat wrong_y(4, 4);
  EXPECT_THROW(linear_forward(wrong_y.view(), c.x.cview(), c.w.cview(), c.b), Error);
  View2 strided = y.view();
  strided.stride[1] = 2;
  EXPECT_THROW(linear_forward(strided, c.x.cview(), c.w.cview(), c.b), Error);
}

}  // namespace
}  // namespace attnkit
