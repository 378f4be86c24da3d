// conv2d in the bf16 mixed-precision mode: y, d_x and d_w against the float64 reference on the
// bf16-rounded x, w and d_y within the float32 summation bars (rounding the operands is the mode's
// only other error), d_b against the unrounded reference (it stays float32), under every
// Conv2dEngine (the column path on gemm_bf16, oneDNN's bf16 convolution, and kAuto's mix), with a
// check that the bars do tell bf16 from float32, and bitwise the same results for 1 and 2 threads.
#include <gtest/gtest.h>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "attnkit/ops/gemm_bf16.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "nn/conv_testing.hpp"

namespace attnkit {
namespace {

using conv_testing::ConvCase;
using conv_testing::ConvProblem;
using conv_testing::ConvReference;
using vision_testing::Buf;

Buf rounded(const Buf& a) {
  Buf r(a.n);
  for (int64_t i = 0; i < a.n; ++i) r[i] = round_to_bf16(a[i]);
  return r;
}

TEST(Conv2dBf16, MatchesTheReferenceOnBf16RoundedOperands) {
  if (!gemm_bf16_available()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  for (const ConvCase& cs : conv_testing::conv_cases()) {
    const ConvProblem pr(cs);
    const ConvReference exact(pr, pr.x, pr.w, pr.dy);
    const ConvReference ref(pr, rounded(pr.x), rounded(pr.w), rounded(pr.dy));
    for (const Conv2dEngine engine : conv_testing::engines()) {
      const Conv2dEngineScope engine_scope(engine);
      const MatmulPrecisionScope bf16(MatmulPrecision::kBf16);
      SCOPED_TRACE(::testing::Message() << "engine " << int(engine) << " case n=" << cs.n << " c=" << cs.c
                                      << " k=" << cs.kh << " s=" << cs.stride);
      conv_testing::expect_fast_matches(pr, ref, exact);
    }
  }
}

TEST(Conv2dBf16, TheBarsTellBf16FromFloat32) {
  // The f32 path's y misses the rounded operands' reference by far more than the bar above: a
  // conv2d that ignored the mode would fail that test.
  const ConvProblem pr({3, 16, 14, 14, 8, 3, 3, 1, 1, false});
  const ConvReference ref(pr, rounded(pr.x), rounded(pr.w), rounded(pr.dy));
  Buf y(pr.dy.n);
  conv2d_forward(y.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), {}, pr.opts());
  int64_t outside = 0;
  const double k = double(pr.p.c * 9 + 2);
  for (int64_t i = 0; i < y.n; ++i) outside += std::abs(double(y[i]) - ref.y[i]) > k * nn_testing::kU * ref.y_mag[i];
  EXPECT_GT(outside, y.n / 2);
}

TEST(Conv2dBf16, SameBitsForAnyThreadCount) {
  if (!gemm_bf16_available()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  const MatmulPrecisionScope bf16(MatmulPrecision::kBf16);
  for (const Conv2dEngine engine : conv_testing::engines())
  for (const ConvCase& cs : {ConvCase{19, 3, 6, 6, 4, 3, 3, 1, 1, true}, ConvCase{21, 16, 16, 13, 9, 3, 3, 1, 1, true},
                            ConvCase{37, 16, 7, 7, 16, 1, 1, 1, 0, false}, ConvCase{9, 8, 12, 12, 2, 7, 7, 1, 3, true}}) {
    const Conv2dEngineScope engine_scope(engine);
    SCOPED_TRACE(::testing::Message() << "engine " << int(engine) << " case n=" << cs.n << " c=" << cs.c << " k=" << cs.kh);
    const ConvProblem pr(cs);
    std::vector<float> runs[2];
    for (int t : {1, 2}) {
      const ThreadCountScope scope(t);
      Buf y(pr.dy.n), dx(pr.x.n), dw(pr.w.n);
      conv2d_forward(y.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan(), pr.opts());
      conv2d_backward(dx.v4(pr.xs()), dw.v4(pr.ws()), {}, pr.dy.c4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()),
                      pr.opts());
      runs[t - 1] = y.raw;
      runs[t - 1].insert(runs[t - 1].end(), dx.raw.begin(), dx.raw.end());
      runs[t - 1].insert(runs[t - 1].end(), dw.raw.begin(), dw.raw.end());
    }
    EXPECT_EQ(runs[0], runs[1]);
  }
}

}  // namespace
}  // namespace attnkit
