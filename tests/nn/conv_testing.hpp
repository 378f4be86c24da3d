#pragma once
// Convolution test problems shared by the f32 and bf16 tests: a seeded layer (x, w, b, d_y), the
// layer shapes that reach every fast path (columns, several images per GEMM, Winograd, oneDNN's
// classes), the float64 references with their magnitude sums, and the k·u·Σ|terms| bar check.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "attnkit/nn/conv2d.hpp"
#include "nn/vision_testing.hpp"

namespace attnkit::conv_testing {

using vision_testing::Buf;

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw, stride, pad;
  bool bias;
};

// One layer's operands: x [N, C, H, W], w [O, C, KH, KW] (σ 0.5), b [O] or empty, d_y [N, O, OH, OW].
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

// |a| element by element.
inline Buf absolute(const Buf& a) {
  Buf r(a.n);
  for (int64_t i = 0; i < a.n; ++i) r[i] = std::abs(a[i]);
  return r;
}

// |got - want| <= k·u·mag element by element, and got's guard bands intact.
inline void expect_close(const Buf& got, const Buf& want, const Buf& mag, double k, const char* what) {
  EXPECT_TRUE(got.intact()) << what << ": guard band overwritten";
  for (int64_t i = 0; i < got.n; ++i)
    ASSERT_LE(std::abs(double(got[i]) - want[i]), k * nn_testing::kU * mag[i] + 1e-30)
        << what << "[" << i << "] got " << got[i] << " want " << want[i];
}

// Every path: the column path (valid and same padding, strides, 1×1 and 7×7 kernels, several
// images per GEMM), Winograd, and the layer classes Conv2dEngine::kAuto gives to oneDNN.
inline const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases{
      {2, 3, 7, 6, 4, 3, 3, 1, 1, true},  {1, 2, 9, 9, 3, 3, 3, 2, 1, false},
      {3, 4, 5, 5, 5, 1, 1, 1, 0, true},  {2, 2, 8, 7, 3, 7, 7, 1, 3, true},
      {17, 3, 5, 4, 2, 2, 3, 2, 0, true}, {1, 1, 3, 3, 1, 3, 3, 1, 0, true},  // 1×1 output
      {2, 2, 1, 2, 3, 3, 3, 1, 1, true},  // kernel as large as the padded input
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
      // Winograd on planes whose tiles fit in one vector (with 16 lanes: 7×7, 8×6, 1×1, 5×7, 8×8),
      // four chunks of 21 images with a short last one (70 images, 32 channels, 12 tiles each);
      // with 8 lanes, in two vectors of two tile rows each (7×7, 8×8; 5×7 with a short second),
      // or in one whose rows fill it (3×8).
      {3, 8, 7, 7, 9, 3, 3, 1, 1, true}, {2, 10, 8, 6, 8, 3, 3, 1, 1, false},
      {2, 8, 1, 1, 8, 3, 3, 1, 1, true}, {70, 32, 5, 7, 8, 3, 3, 1, 1, false},
      {3, 8, 8, 8, 10, 3, 3, 1, 1, true}, {2, 8, 3, 8, 9, 3, 3, 1, 1, false},
      // Layers Conv2dEngine::kAuto gives to oneDNN (>= 16 channels each way): all three passes on
      // a 7×7 plane over groups of images, d_w only on a 13×12 plane.
      {35, 16, 7, 7, 24, 3, 3, 1, 1, true}, {5, 16, 13, 12, 16, 3, 3, 1, 1, false},
  };
  return cases;
}

// The built-in paths, the automatic choice and, when built with it, oneDNN for every layer.
inline std::vector<Conv2dEngine> engines() {
  std::vector<Conv2dEngine> e{Conv2dEngine::kBuiltin, Conv2dEngine::kAuto};
  if (conv2d_has_onednn()) e.push_back(Conv2dEngine::kOneDnn);
  return e;
}

// The float64 reference of a layer from the given x, w, d_y (pr's b; d_w and d_b start from the
// seeds 7 and 8, as they are added into), and the same sums over absolute values (the bars' scale).
struct ConvReference {
  Buf y, y_mag, dx, dx_mag, dw, dw_mag, db, db_mag;
  ConvReference(const ConvProblem& pr, const Buf& x, const Buf& w, const Buf& dy)
      : y(pr.dy.n), y_mag(pr.dy.n), dx(pr.x.n), dx_mag(pr.x.n), dw(pr.w.n), dw_mag(pr.w.n), db(pr.b.n),
        db_mag(pr.b.n) {
    conv2d_forward_reference(y.v4(pr.ys()), x.c4(pr.xs()), w.c4(pr.ws()), pr.b.cspan(), pr.opts());
    const Buf ax = absolute(x), aw = absolute(w), ab = absolute(pr.b), ady = absolute(dy);
    conv2d_forward_reference(y_mag.v4(pr.ys()), ax.c4(pr.xs()), aw.c4(pr.ws()), ab.cspan(), pr.opts());
    dw.randn(7), db.randn(8);
    conv2d_backward_reference(dx.v4(pr.xs()), dw.v4(pr.ws()), db.span(), dy.c4(pr.ys()), x.c4(pr.xs()),
                              w.c4(pr.ws()), pr.opts());
    dw_mag = absolute(Buf(dw.n).randn(7)), db_mag = absolute(Buf(db.n).randn(8));
    conv2d_backward_reference(dx_mag.v4(pr.xs()), dw_mag.v4(pr.ws()), db_mag.span(), ady.c4(pr.ys()),
                              ax.c4(pr.xs()), aw.c4(pr.ws()), pr.opts());
  }
};

// conv2d_forward and conv2d_backward on pr's operands against `ref` within float32 summation bars
// (k·u·Σ|terms| with k the terms per sum plus a few), d_b against `ref_db` (its d_b, d_b_mag).
inline void expect_fast_matches(const ConvProblem& pr, const ConvReference& ref, const ConvReference& ref_db) {
  const ConvCase& cs = pr.p;
  Buf y(pr.dy.n);
  conv2d_forward(y.v4(pr.ys()), pr.x.c4(pr.xs()), pr.w.c4(pr.ws()), pr.b.cspan(), pr.opts());
  expect_close(y, ref.y, ref.y_mag, double(cs.c * cs.kh * cs.kw + 2), "y");
  Buf dx(pr.x.n), dw(pr.w.n), db(pr.b.n);
  dw.randn(7), db.randn(8);
  dx.randn(9);  // assigned: the old contents must not leak through
  conv2d_backward(dx.v4(pr.xs()), dw.v4(pr.ws()), db.span(), pr.dy.c4(pr.ys()), pr.x.c4(pr.xs()),
                  pr.w.c4(pr.ws()), pr.opts());
  expect_close(dx, ref.dx, ref.dx_mag, double(cs.o * cs.kh * cs.kw + 2), "d_x");
  expect_close(dw, ref.dw, ref.dw_mag, double(cs.n * pr.oh * pr.ow + 20), "d_w");
  expect_close(db, ref_db.db, ref_db.db_mag, double(cs.n * pr.oh * pr.ow + 4), "d_b");
}

}  // namespace attnkit::conv_testing
