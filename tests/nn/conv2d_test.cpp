// conv2d: fast paths (im2col + sgemm, Winograd F(2×2, 3×3)) vs the double reference within a rounding bar derived from
// the data (k·u·Σ|terms|), the reference's gradients vs central finite differences, bitwise
// determinism across thread counts, the += / = gradient contract, and argument errors; the fast-path
// checks run under every Conv2dEngine (built-in only, automatic, oneDNN everywhere when built with it).
#include <gtest/gtest.h>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "nn/vision_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using vision_testing::Buf;
using vision_testing::expect_gradient;
using vision_testing::weighted;

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw, stride, pad;
  bool bias;
};

struct ConvProblem {
  ConvCase p;
  int64_t oh, ow;
  Buf x, w, b, dy;
  explicit ConvProblem(const ConvCase& cs, uint32_t seed = 1)
      : p(cs),
        oh(conv2d_output_size(cs.h, cs.kh, cs.stride, cs.pad)),
        ow(conv2d_output_size(cs.w, cs.kw, cs.stride, cs.pad)),
        x(cs.n * cs.c * cs.h * cs.w),
        w(cs.o * cs.c * cs.kh * cs.kw),
        b(cs.bias ? cs.o : 0),
        dy(cs.n * cs.o * oh * ow) {
    x.randn(seed), w.randn(seed + 1, 0.5f), b.randn(seed + 2), dy.randn(seed + 3);
  }
  std::array<int64_t, 4> xs() const { return {p.n, p.c, p.h, p.w}; }
  std::array<int64_t, 4> ws() const { return {p.o, p.c, p.kh, p.kw}; }
  std::array<int64_t, 4> ys() const { return {p.n, p.o, oh, ow}; }
  Conv2dOptions opts() const { return {.stride = p.stride, .padding = p.pad}; }
};

Buf absolute(const Buf& a) {
  Buf r(a.n);
  for (int64_t i = 0; i < a.n; ++i) r[i] = std::abs(a[i]);
  return r;
}

void expect_close(const Buf& got, const Buf& want, const Buf& mag, double k, const char* what) {
  EXPECT_TRUE(got.intact()) << what << ": guard band overwritten";
  for (int64_t i = 0; i < got.n; ++i)
    ASSERT_LE(std::abs(double(got[i]) - want[i]), k * nn_testing::kU * mag[i] + 1e-30)
        << what << "[" << i << "] got " << got[i] << " want " << want[i];
}

const ConvCase kCases[] = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, true},  {1, 2, 9, 9, 3, 3, 3, 2, 1, false},
    {3, 4, 5, 5, 5, 1, 1, 1, 0, true},  {2, 2, 8, 7, 3, 7, 7, 1, 3, true},
    {17, 3, 5, 4, 2, 2, 3, 2, 0, true}, {1, 1, 2, 2, 1, 3, 3, 1, 0, true},  // empty output
    // Stride 1 without "same" width (valid, and wider than same padding): the row-by-row path.
    {3, 2, 6, 7, 3, 3, 3, 1, 0, true}, {2, 2, 5, 5, 3, 3, 3, 1, 2, false},
    // Many small images: several images per GEMM, with a short last chunk.
    {40, 3, 6, 5, 4, 3, 3, 1, 1, true}, {33, 2, 9, 8, 3, 3, 3, 2, 1, false}, {37, 3, 4, 4, 6, 1, 1, 1, 0, true},
    // Winograd F(2×2, 3×3) (3×3, stride 1, padding 1, >= 8 channels in and out, sides >= 12):
    // odd and even sides, several images per chunk with a short last chunk (67 images, 24 per
    // chunk), a plane wider than one vector of tiles (40 columns).
    {5, 9, 13, 12, 10, 3, 3, 1, 1, true}, {3, 16, 14, 14, 8, 3, 3, 1, 1, false},
    {2, 8, 12, 40, 8, 3, 3, 1, 1, true}, {67, 8, 12, 13, 12, 3, 3, 1, 1, false},
    {2, 8, 12, 16, 8, 3, 3, 1, 1, true},  // 16 wide: row-by-row input, per-row-of-tiles output
    // Input gradient by Winograd only when both directions qualify: here O = 4 < 8.
    {2, 12, 12, 12, 4, 3, 3, 1, 1, true},
    // Winograd on planes whose tiles fit in one vector (with 16 lanes: 7×7, 8×6, 1×1, 5×7),
    // four chunks of 21 images with a short last one (70 images, 32 channels, 12 tiles each).
    {3, 8, 7, 7, 9, 3, 3, 1, 1, true}, {2, 10, 8, 6, 8, 3, 3, 1, 1, false},
    {2, 8, 1, 1, 8, 3, 3, 1, 1, true}, {70, 32, 5, 7, 8, 3, 3, 1, 1, false},
    // Layers Conv2dEngine::kAuto gives to oneDNN (>= 16 channels each way): all three passes on
    // a 7×7 plane over groups of images, d_w only on a 13×12 plane.
    {35, 16, 7, 7, 24, 3, 3, 1, 1, true}, {5, 16, 13, 12, 16, 3, 3, 1, 1, false},
};

// The built-in paths, the automatic choice and, when built with it, oneDNN for every layer.
std::vector<Conv2dEngine> engines() {
  std::vector<Conv2dEngine> e{Conv2dEngine::kBuiltin, Conv2dEngine::kAuto};
  if (conv2d_has_onednn()) e.push_back(Conv2dEngine::kOneDnn);
  return e;
}

TEST(Conv2d, FastMatchesReference) {
  for (const auto& cs : kCases) {
    ConvProblem pr(cs);
    Buf y_ref(pr.dy.n), y_mag(pr.dy.n);
    conv2d_forward_reference(y_ref.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan(), pr.opts());
    const Buf ax = absolute(pr.x), aw = absolute(pr.w), ab = absolute(pr.b), ady = absolute(pr.dy);
    conv2d_forward_reference(y_mag.v4(pr.ys()), ax.c4(pr.xs()), aw.c4(pr.ws()), ab.cspan(), pr.opts());
    // Backward: d_w and d_b start from non-zero values (they are added into).
    Buf dx_ref(pr.x.n), dw_ref(pr.w.n), db_ref(pr.b.n);
    dw_ref.randn(7), db_ref.randn(8);
    conv2d_backward_reference(dx_ref.v4(pr.xs()), dw_ref.v4(pr.ws()), db_ref.span(),
                              pr.dy.c4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.opts());
    Buf dx_mag(pr.x.n), dw_mag(pr.w.n), db_mag(pr.b.n);
    dw_mag = absolute(Buf(dw_ref.n).randn(7)), db_mag = absolute(Buf(db_ref.n).randn(8));
    conv2d_backward_reference(dx_mag.v4(pr.xs()), dw_mag.v4(pr.ws()), db_mag.span(),
                              ady.c4(pr.ys()), ax.c4(pr.xs()), aw.c4(pr.ws()), pr.opts());
    for (const Conv2dEngine engine : engines()) {
      const Conv2dEngineScope engine_scope(engine);
      SCOPED_TRACE(::testing::Message() << "engine " << int(engine) << " case n=" << cs.n << " c=" << cs.c
                                      << " k=" << cs.kh << " s=" << cs.stride);
      Buf y(pr.dy.n);
      conv2d_forward(y.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan(), pr.opts());
      expect_close(y, y_ref, y_mag, double(cs.c * cs.kh * cs.kw + 2), "y");
      Buf dx(pr.x.n), dw(pr.w.n), db(pr.b.n);
      dw.randn(7), db.randn(8);
      dx.randn(9);  // assigned: the old contents must not leak through
      conv2d_backward(dx.v4(pr.xs()), dw.v4(pr.ws()), db.span(), pr.dy.c4(pr.ys()), pr.x.c4(pr.xs()),
                      pr.w.c4(pr.ws()), pr.opts());
      expect_close(dx, dx_ref, dx_mag, double(cs.o * cs.kh * cs.kw + 2), "d_x");
      expect_close(dw, dw_ref, dw_mag, double(cs.n * pr.oh * pr.ow + 20), "d_w");
      expect_close(db, db_ref, db_mag, double(cs.n * pr.oh * pr.ow + 4), "d_b");
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
               "padding: expected >= 0");
  expect_error([&] { conv2d_forward(y.v4(pr.ys()), pr.x.c4({1, 1, 4, 8}), pr.w.c4(pr.ws()), pr.b.cspan(), pr.opts()); },
               "w: expected [O, C, KH, KW] with C = 1");
  expect_error([&] { conv2d_forward(y.v4({1, 3, 4, 3}), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan(), pr.opts()); },
               "y: expected shape [N, O, OH, OW] = [1, 3, 4, 4]");
  expect_error([&] { conv2d_forward(y.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan().first(2), pr.opts()); },
               "b: expected 0 or [O] = 3 elements, got 2");
  ConstView4 strided = pr.x.c4(pr.xs());
  strided.stride[2] = 5;
  expect_error([&] { conv2d_forward(y.v4(pr.ys()), strided, pr.w.c4(pr.ws()), {}, pr.opts()); },
               "x: must be contiguous NCHW");
}

}  // namespace
}  // namespace attnkit
