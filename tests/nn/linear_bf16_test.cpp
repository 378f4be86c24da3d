// Linear layer in the bf16 mixed-precision mode: y, d_x and d_W against the float64 reference on
// the bf16-rounded operands (float32-sum bars: rounding the inputs is the mode's only other
// error), d_b against the unrounded reference (it stays float32), the += contract, and the f32
// path being the default.
#include <gtest/gtest.h>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/ops/gemm_bf16.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "nn/nn_testing.hpp"

namespace attnkit {
namespace {

using nn_testing::kU;
using nn_testing::Mat;

Mat rounded(const Mat& m) {
  Mat r = m;
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) r.at(i, j) = round_to_bf16(m.at(i, j));
  return r;
}

void expect_bf16_matches_reference(int64_t t, int64_t in, int64_t out, bool bias) {
  SCOPED_TRACE(::testing::Message() << "T=" << t << " in=" << in << " out=" << out << " bias=" << bias);
  const uint32_t seed = uint32_t(t * 131 + in * 7 + out);
  const Mat x = Mat(t, in).randn(seed), w = Mat(out, in).randn(seed + 1), d_y = Mat(t, out).randn(seed + 2);
  const std::vector<float> b = bias ? randn(out, seed + 3) : std::vector<float>{};
  const Mat xr = rounded(x), wr = rounded(w), d_yr = rounded(d_y);
  const Mat ax = xr.abs(), aw = wr.abs(), ady = d_yr.abs();

  Mat y(t, out), y_ref(t, out), mag(t, out);
  Mat d_x(t, in), d_x_ref(t, in), m_dx(t, in);
  Mat d_w = Mat(out, in).randn(5), d_w_ref = d_w, m_dw = d_w.abs();
  std::vector<float> d_b = bias ? randn(out, 6) : std::vector<float>{}, d_b_ref = d_b;
  {
    const MatmulPrecisionScope bf16(MatmulPrecision::kBf16);
    linear_forward(y.view(), x.cview(), w.cview(), b);
    d_x.randn(9);  // d_x is assigned, not accumulated
    linear_backward(d_x.view(), d_w.view(), d_b, d_y.cview(), x.cview(), w.cview());
  }
  linear_forward_reference(y_ref.view(), xr.cview(), wr.cview(), b);
  linear_forward_reference(mag.view(), ax.cview(), aw.cview(), nn_testing::abs_vec(b));
  linear_backward_reference(d_x_ref.view(), d_w_ref.view(), {}, d_yr.cview(), xr.cview(), wr.cview());
  linear_backward_reference(m_dx.view(), m_dw.view(), {}, ady.cview(), ax.cview(), aw.cview());
  linear_backward_reference({}, {}, d_b_ref, d_y.cview(), x.cview(), w.cview());
  nn_testing::expect_within(
      y, y_ref, [&](int64_t i, int64_t j) { return double(in + 3) * kU * mag.at(i, j); }, "y");
  nn_testing::expect_within(
      d_x, d_x_ref, [&](int64_t i, int64_t j) { return double(out + 3) * kU * m_dx.at(i, j); }, "d_x");
  nn_testing::expect_within(
      d_w, d_w_ref, [&](int64_t i, int64_t j) { return double(t + 3) * kU * m_dw.at(i, j); }, "d_w");
  // d_b is summed in double and rounded once, then added to the prior value (as in float32 mode).
  std::vector<float> m_db = nn_testing::abs_vec(bias ? randn(out, 6) : std::vector<float>{});
  linear_backward_reference({}, {}, m_db, d_y.abs().cview(), x.cview(), w.cview());
  nn_testing::expect_within(d_b, d_b_ref, [&](size_t i) { return 3 * kU * m_db[i]; }, "d_b");
}

TEST(NnLinearBf16, MatchesTheReferenceOnBf16RoundedOperands) {
  if (!gemm_bf16_available()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  for (int64_t t : {1, 7, 65})
    for (int64_t in : {1, 17, 64})
      for (int64_t out : {1, 17, 64}) expect_bf16_matches_reference(t, in, out, (t + in + out) % 2 == 0);
  for (int threads : {1, 2}) {
    ThreadCountScope scope(threads);
    expect_bf16_matches_reference(600, 64, 96, true);
  }
}

// Without a precision scope the layer is the float32 path, bit for bit, and bf16 differs from it.
TEST(NnLinearBf16, Float32IsTheDefault) {
  const Mat x = Mat(65, 64).randn(1), w = Mat(48, 64).randn(2);
  Mat y_default(65, 48), y_f32(65, 48), y_bf16(65, 48);
  linear_forward(y_default.view(), x.cview(), w.cview(), {});
  {
    const MatmulPrecisionScope f32(MatmulPrecision::kF32);
    linear_forward(y_f32.view(), x.cview(), w.cview(), {});
  }
  EXPECT_TRUE(nn_testing::bitwise_equal(y_default, y_f32));
  if (!gemm_bf16_available()) GTEST_SKIP() << "the float32 half ran; no bf16 units for the bf16 half";
  {
    const MatmulPrecisionScope bf16(MatmulPrecision::kBf16);
    linear_forward(y_bf16.view(), x.cview(), w.cview(), {});
  }
  EXPECT_FALSE(nn_testing::bitwise_equal(y_default, y_bf16));
}

}  // namespace
}  // namespace attnkit
