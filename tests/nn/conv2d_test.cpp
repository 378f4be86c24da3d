// conv2d: fast paths (im2col + sgemm, Winograd F(2×2, 3×3)) vs the double reference within a rounding bar derived from
// the data (k·u·Σ|terms|), the reference's gradients vs central finite differences, bitwise
// determinism across thread counts, the += / = gradient contract, and argument errors; the fast-path
// checks run under every Conv2dEngine (built-in only, automatic, oneDNN everywhere when built with it).
#include <gtest/gtest.h>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "nn/conv_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using conv_testing::ConvCase;
using conv_testing::ConvProblem;
using conv_testing::engines;
using vision_testing::Buf;
using vision_testing::expect_gradient;
using vision_testing::weighted;

TEST(Conv2d, FastMatchesReference) {
  for (const auto& cs : conv_testing::conv_cases()) {
    const ConvProblem pr(cs);
    const conv_testing::ConvReference ref(pr, pr.x, pr.w, pr.dy);
    for (const Conv2dEngine engine : engines()) {
      const Conv2dEngineScope engine_scope(engine);
      SCOPED_TRACE(::testing::Message() << "engine " << int(engine) << " case n=" << cs.n << " c=" << cs.c
                                      << " k=" << cs.kh << " s=" << cs.stride);
      conv_testing::expect_fast_matches(pr, ref, ref);
    }
  }
}

TEST(Conv2d, ReferenceGradientsMatchFiniteDifferences) {
  for (const ConvCase& cs : {ConvCase{2, 2, 5, 4, 3, 3, 3, 2, 1, true}, ConvCase{1, 3, 4, 4, 2, 1, 1, 1, 0, true}}) {
    ConvProblem pr(cs, 11);
    Buf y(pr.dy.n), dx(pr.x.n), dw(pr.w.n), db(pr.b.n);
    auto loss = [&] {
      conv2d_forward_reference(y.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan(), pr.opts());
      return weighted(y, pr.dy);
    };
    conv2d_backward_reference(dx.v4(pr.xs()), dw.v4(pr.ws()), db.span(), pr.dy.c4(pr.ys()),
                              pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.opts());
    expect_gradient(loss, pr.x, dx, "d_x");
    expect_gradient(loss, pr.w, dw, "d_w");
    expect_gradient(loss, pr.b, db, "d_b");
  }
}

TEST(Conv2d, BitwiseIdenticalForAnyThreadCount) {
  // The column path, then Winograd (three chunks of images; then one-vector planes, 3 chunks).
  // oneDNN (under kOneDnn, and kAuto's classes): several chunks and groups with short last ones.
  for (const Conv2dEngine engine : engines())
  for (const ConvCase& cs : {ConvCase{19, 3, 6, 6, 4, 3, 3, 1, 1, true}, ConvCase{21, 16, 16, 13, 9, 3, 3, 1, 1, true},
                            ConvCase{40, 32, 7, 7, 8, 3, 3, 1, 1, true}, ConvCase{37, 16, 7, 7, 16, 3, 3, 1, 1, false}}) {
    const Conv2dEngineScope engine_scope(engine);
    SCOPED_TRACE(::testing::Message() << "engine " << int(engine) << " case n=" << cs.n << " c=" << cs.c);
    ConvProblem pr(cs);
    Buf y1(pr.dy.n), y2(pr.dy.n), dx1(pr.x.n), dx2(pr.x.n), dw1(pr.w.n), dw2(pr.w.n);
    for (int t : {1, 2}) {
      ThreadCountScope scope(t);
      Buf& y = t == 1 ? y1 : y2;
      Buf& dx = t == 1 ? dx1 : dx2;
      Buf& dw = t == 1 ? dw1 : dw2;
      conv2d_forward(y.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan(), pr.opts());
      conv2d_backward(dx.v4(pr.xs()), dw.v4(pr.ws()), {}, pr.dy.c4(pr.ys()), pr.x.c4(pr.xs()),
                      pr.w.c4(pr.ws()), pr.opts());
    }
    EXPECT_EQ(y1.raw, y2.raw);
    EXPECT_EQ(dx1.raw, dx2.raw);
    EXPECT_EQ(dw1.raw, dw2.raw);
  }
}

TEST(Conv2d, OptionalGradientsAreSkipped) {
  ConvProblem pr({2, 2, 4, 4, 2, 3, 3, 1, 1, true});
  Buf dw(pr.w.n), dw_ref(pr.w.n);
  conv2d_backward({}, dw.v4(pr.ws()), {}, pr.dy.c4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.opts());
  conv2d_backward_reference({}, dw_ref.v4(pr.ws()), {}, pr.dy.c4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.opts());
  for (int64_t i = 0; i < dw.n; ++i) EXPECT_NEAR(dw[i], dw_ref[i], 1e-4 * (1 + std::abs(dw_ref[i])));
}

TEST(Conv2d, BadArgumentsNameTheArgument) {
  ConvProblem pr({1, 2, 4, 4, 3, 3, 3, 1, 1, true});
  Buf y(pr.dy.n);
  expect_error([&] { conv2d_forward(y.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan(), {.stride = 0}); },
               "conv2d_forward: stride: expected >= 1, got 0");
  expect_error([&] { conv2d_forward(y.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan(), {.padding = -1}); },
               "padding: expected in [0, 2^40]");
  expect_error([&] { conv2d_forward(y.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan(),
                                    {.padding = int64_t(1) << 62}); },
               "padding: expected in [0, 2^40]");
  expect_error([&] { conv2d_forward(y.v4(pr.ys()), pr.x.c4({1, 1, 4, 8}), pr.w.c4(pr.ws()), pr.b.cspan(), pr.opts()); },
               "w: expected [O, C, KH, KW] with C = 1");
  expect_error([&] { conv2d_forward(y.v4({1, 3, 4, 3}), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan(), pr.opts()); },
               "y: expected shape [N, O, OH, OW] = [1, 3, 4, 4]");
  expect_error([&] { conv2d_forward(y.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan().first(2), pr.opts()); },
               "b: expected 0 or [O] = 3 elements, got 2");
  // A kernel larger than the padded input (PyTorch refuses it; the output would be empty).
  expect_error([&] { conv2d_forward(y.v4({1, 3, 0, 0}), pr.x.c4({1, 2, 1, 1}), pr.w.c4(pr.ws()), {}, {}); },
               "conv2d_forward: kernel 3×3 is larger than the padded input 1×1");
  expect_error([&] { conv2d_backward(pr.x.v4({1, 2, 1, 1}), {}, {}, y.c4({1, 3, 0, 0}), pr.x.c4({1, 2, 1, 1}),
                                     pr.w.c4(pr.ws()), {}); },
               "conv2d_backward: kernel 3×3 is larger");
  ConstView4 strided = pr.x.c4(pr.xs());
  strided.stride[2] = 5;
  expect_error([&] { conv2d_forward(y.v4(pr.ys()), strided, pr.w.c4(pr.ws()), {}, pr.opts()); },
               "x: must be contiguous NCHW");
}

}  // namespace
}  // namespace attnkit
