// Pooling, global pooling and batch norm 2d: forward against direct formulas written here,
// gradients against central finite differences (tiny shapes), running-statistics updates,
// determinism across thread counts, and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/batch_norm2d.hpp"
#include "attnkit/nn/global_pool.hpp"
#include "attnkit/nn/pool2d.hpp"
#include "nn/vision_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using vision_testing::Buf;
using vision_testing::expect_gradient;
using vision_testing::weighted;

// The 2×2 fast path, a padded stride-2 window and a window that leaves padding out of the average.
const std::vector<Pool2dOptions> kPoolings = {
    {.kernel = 2},
    {.kernel = 3, .stride = 2, .padding = 1},
    {.kernel = 3, .stride = 1, .padding = 1, .count_include_pad = false}};

// Pooled output size along a dimension of n positions (stride 0 means the kernel size).
int64_t pooled_size(int64_t n, const Pool2dOptions& o) {
  return (n + 2 * o.padding - o.kernel) / (o.stride ? o.stride : o.kernel) + 1;
}

TEST(Pool2d, ForwardMatchesDirectWindows) {
  const int64_t n = 2, c = 3, h = 7, w = 6;
  Buf x(n * c * h * w);
  x.randn(3);
  for (const Pool2dOptions& o : kPoolings) {
    const int64_t s = o.stride ? o.stride : o.kernel;
    const int64_t oh = pooled_size(h, o), ow = pooled_size(w, o);
    Buf ymax(n * c * oh * ow), yavg(n * c * oh * ow);
    std::vector<int32_t> am(size_t(ymax.n));
    max_pool2d_forward(ymax.v4({n, c, oh, ow}), am, x.c4({n, c, h, w}), o);
    avg_pool2d_forward(yavg.v4({n, c, oh, ow}), x.c4({n, c, h, w}), o);
    EXPECT_TRUE(ymax.intact() && yavg.intact());
    for (int64_t pl = 0; pl < n * c; ++pl)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double mx = -INFINITY, sum = 0;
          int cnt = 0;
          for (int64_t u = 0; u < o.kernel; ++u)
            for (int64_t v = 0; v < o.kernel; ++v) {
              const int64_t hi = i * s - o.padding + u, wi = j * s - o.padding + v;
              if (hi < 0 || hi >= h || wi < 0 || wi >= w) continue;
              mx = std::max(mx, double(x[pl * h * w + hi * w + wi]));
              sum += x[pl * h * w + hi * w + wi];
              ++cnt;
            }
          const int64_t at = pl * oh * ow + i * ow + j;
          EXPECT_EQ(ymax[at], float(mx));
          EXPECT_EQ(x[pl * h * w + am[size_t(at)]], ymax[at]);
          const double div = o.count_include_pad ? double(o.kernel * o.kernel) : cnt;
          EXPECT_NEAR(yavg[at], sum / div, 1e-6);
        }
  }
}

TEST(Pool2d, MaxPropagatesTheFirstNaNOfEachWindow) {
  // 2×2 windows (the fast path) and 3×3 stride-2 padded windows (the general path).
  for (const Pool2dOptions& o : {Pool2dOptions{.kernel = 2}, Pool2dOptions{.kernel = 3, .stride = 2, .padding = 1}}) {
    const int64_t h = 13, w = 12, s = o.stride ? o.stride : o.kernel;  // several vectors of pairs
    const int64_t oh = pooled_size(h, o), ow = pooled_size(w, o);
    Buf x(h * w);
    for (int64_t i = 0; i < x.n; ++i) x[i] = float(i);
    for (int64_t i = 0; i < x.n; i += 7) x[i] = -x[i];  // maxima in varying window positions
    // NaN pairs inside one window and across windows, in the first and later vectors.
    for (int64_t at : {13, 14, 25, 26, 51, 88, 89, 100, 101, 112, 131}) x[at] = NAN;
    Buf y(oh * ow);
    std::vector<int32_t> am(size_t(y.n));
    max_pool2d_forward(y.v4({1, 1, oh, ow}), am, x.c4({1, 1, h, w}), o);
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        int32_t first_nan = -1;  // the first NaN of the window in row-major order
        float mx = -INFINITY;
        for (int64_t u = 0; u < o.kernel; ++u)
          for (int64_t v = 0; v < o.kernel; ++v) {
            const int64_t hi = i * s - o.padding + u, wi = j * s - o.padding + v;
            if (hi < 0 || hi >= h || wi < 0 || wi >= w) continue;
            const float e = x[hi * w + wi];
            if (std::isnan(e) && first_nan < 0) first_nan = int32_t(hi * w + wi);
            if (!std::isnan(e)) mx = std::max(mx, e);
          }
        const int64_t at = i * ow + j;
        if (first_nan >= 0) {
          EXPECT_TRUE(std::isnan(y[at])) << "window " << i << "," << j;
          EXPECT_EQ(am[size_t(at)], first_nan) << "window " << i << "," << j;
        } else {
          EXPECT_EQ(y[at], mx) << "window " << i << "," << j;
        }
      }
  }
}

TEST(Pool2d, GradientsMatchFiniteDifferences) {
  const int64_t n = 2, c = 2, h = 5, w = 5;
  Buf x(n * c * h * w);
  x.randn(5);
  for (const Pool2dOptions& o : kPoolings) {
    const int64_t oh = pooled_size(h, o), ow = pooled_size(w, o);
    Buf r(n * c * oh * ow), y(r.n), dx(x.n);
    r.randn(6);
    std::vector<int32_t> am(size_t(r.n));
    // Max: the finite difference is valid where no two window values are within the step.
    auto max_loss = [&] { max_pool2d_forward(y.v4({n, c, oh, ow}), am, x.c4({n, c, h, w}), o); return weighted(y, r); };
    max_loss();
    dx.randn(1);
    max_pool2d_backward(dx.v4({n, c, h, w}), r.c4({n, c, oh, ow}), am);
    expect_gradient(max_loss, x, dx, "max_pool2d d_x", 1e-3f);
    auto avg_loss = [&] { avg_pool2d_forward(y.v4({n, c, oh, ow}), x.c4({n, c, h, w}), o); return weighted(y, r); };
    dx.randn(2);
    avg_pool2d_backward(dx.v4({n, c, h, w}), r.c4({n, c, oh, ow}), o);
    expect_gradient(avg_loss, x, dx, "avg_pool2d d_x");
    EXPECT_TRUE(dx.intact());
  }
}

// max_pool2d_forward_of: bitwise max_pool2d_forward of the stored input (each pooling, odd and
// even sides), each plane made once; then its argument errors.
TEST(Pool2d, ForwardOfMadePlanesEqualsForwardOfStoredInput) {
  for (const Pool2dOptions& o : kPoolings)
    for (int64_t side : {6, 7}) {
      const int64_t n = 2, c = 3, oh = pooled_size(side, o), m = n * c * oh * oh;
      Buf x(n * c * side * side), ya(m), yb(m);
      x.randn(61);
      std::vector<int32_t> ia(static_cast<size_t>(m)), ib(static_cast<size_t>(m));
      max_pool2d_forward(ya.v4({n, c, oh, oh}), ia, x.c4({n, c, side, side}), o);
      std::vector<int> made(static_cast<size_t>(n * c), 0);
      max_pool2d_forward_of(yb.v4({n, c, oh, oh}), ib, {n, c, side, side}, o, [&](int64_t p, float* out) {
        ++made[size_t(p)];
        std::copy_n(x.data() + p * side * side, side * side, out);
      });
      EXPECT_EQ(ya.raw, yb.raw);
      EXPECT_EQ(ia, ib);
      EXPECT_EQ(made, std::vector<int>(static_cast<size_t>(n * c), 1));
    }
  Buf y(2 * 3 * 3 * 3);
  std::vector<int32_t> am(18);
  const auto none = [](int64_t, float*) {};
  EXPECT_THROW(max_pool2d_forward_of(y.v4({2, 3, 3, 3}), am, {2, 3, 7, 7}, {.kernel = 2}, none), Error);  // y: 3×3
  EXPECT_THROW(max_pool2d_forward_of(y.v4({2, 3, 3, 3}), am, {2, 3, 6, -6}, {.kernel = 2}, none), Error);
  EXPECT_THROW(max_pool2d_forward_of(y.v4({2, 3, 3, 3}), am, {2, 3, 6, 6}, {.kernel = 0}, none), Error);
}

TEST(Pool2d, BadArguments) {
  Buf x(16), y(4);
  std::vector<int32_t> am(4);
  EXPECT_THROW(max_pool2d_forward(y.v4({1, 1, 2, 2}), am, x.c4({1, 1, 4, 4}), {.kernel = 2, .padding = 2}), Error);
  EXPECT_THROW(avg_pool2d_forward(y.v4({1, 1, 2, 2}), x.c4({1, 1, 4, 4}), {.kernel = 0}), Error);
  EXPECT_THROW(avg_pool2d_forward(y.v4({1, 1, 2, 2}), x.c4({1, 1, 4, 4}), {.kernel = 3}), Error);  // y must be 1×1
  // A window larger than the padded plane (PyTorch refuses it; the output would be empty).
  expect_error([&] { avg_pool2d_forward(y.v4({1, 1, 0, 0}), x.c4({1, 1, 4, 4}), {.kernel = 5}); },
               "avg_pool2d_forward: kernel 5×5 is larger than the padded input 4×4");
  expect_error([&] { max_pool2d_forward(y.v4({1, 1, 0, 0}), {}, x.c4({1, 1, 4, 4}), {.kernel = 5}); },
               "kernel 5×5 is larger");
  // 2·padding overflowed int64 and passed the padding check.
  expect_error([&] { max_pool2d_forward(y.v4({1, 1, 2, 2}), am, x.c4({1, 1, 4, 4}),
                                        {.kernel = 3, .padding = int64_t(1) << 62}); },
               "padding: expected 0 <= 2·padding <= kernel = 3");
  am[0] = 16;
  EXPECT_THROW(max_pool2d_backward(x.v4({1, 1, 4, 4}), y.c4({1, 1, 2, 2}), am), Error);
  am[0] = -1;  // negative indices too
  EXPECT_THROW(max_pool2d_backward(x.v4({1, 1, 4, 4}), y.c4({1, 1, 2, 2}), am), Error);
  am[0] = 0, am[3] = 16;  // the last entry
  EXPECT_THROW(max_pool2d_backward(x.v4({1, 1, 4, 4}), y.c4({1, 1, 2, 2}), am), Error);
  am[3] = 15;
  EXPECT_NO_THROW(max_pool2d_backward(x.v4({1, 1, 4, 4}), y.c4({1, 1, 2, 2}), am));
}

TEST(GlobalPool, MaxTakesTheFirstMaximumOrTheFirstNaN) {
  // Planes of 1, 7, 37 and 100 pixels (shorter than, and several, vectors) with ties, -inf and NaNs.
  for (const int64_t hw : {1, 7, 37, 100}) {
    SCOPED_TRACE(::testing::Message() << "plane of " << hw);
    const int64_t planes = 6;
    Buf x(planes * hw);
    for (int64_t i = 0; i < x.n; ++i) x[i] = float((i * 7) % 5);  // ties: many 4s per plane
    for (int64_t i = 0; i < hw; ++i) x[i] = -INFINITY;             // plane 0: all -inf
    if (hw > 3) x[2 * hw + hw - 1] = NAN, x[2 * hw + 2] = NAN;     // plane 2: two NaNs
    if (hw > 20) x[3 * hw + 19] = NAN;                             // plane 3: a NaN past a vector
    x[4 * hw + hw - 1] = 9.0f;                                     // plane 4: maximum at the end
    std::vector<int32_t> am(static_cast<size_t>(planes));
    Buf y(planes);
    global_max_pool_forward(y.v2(1, planes), am, x.c4({1, planes, hw, 1}));
    for (int64_t p = 0; p < planes; ++p) {
      int64_t want = 0;  // the sequential rule: later wins if larger, or if it is the first NaN
      for (int64_t i = 1; i < hw; ++i) {
        const float v = x[p * hw + i], b = x[p * hw + want];
        if (v > b || (std::isnan(v) && !std::isnan(b))) want = i;
      }
      EXPECT_EQ(am[size_t(p)], want) << "plane " << p;
      EXPECT_TRUE(std::isnan(y[p]) ? std::isnan(x[p * hw + want]) : y[p] == x[p * hw + want]) << "plane " << p;
    }
  }
}

TEST(GlobalPool, ForwardAndGradients) {
  const int64_t n = 3, c = 4, h = 3, w = 5;
  Buf x(n * c * h * w), r(n * c), y(n * c), dx(x.n);
  x.randn(8), r.randn(9);
  std::vector<int32_t> am(size_t(n * c));
  global_avg_pool_forward(y.v2(n, c), x.c4({n, c, h, w}));
  global_max_pool_forward(Buf(n * c).v2(n, c), am, x.c4({n, c, h, w}));
  for (int64_t p = 0; p < n * c; ++p) {
    double s = 0;
    float mx = -INFINITY;
    for (int64_t i = 0; i < h * w; ++i) s += x[p * h * w + i], mx = std::max(mx, x[p * h * w + i]);
    EXPECT_NEAR(y[p], s / double(h * w), 1e-6);
    EXPECT_EQ(x[p * h * w + am[size_t(p)]], mx);
  }
  auto avg_loss = [&] { global_avg_pool_forward(y.v2(n, c), x.c4({n, c, h, w})); return weighted(y, r); };
  global_avg_pool_backward(dx.v4({n, c, h, w}), r.c2(n, c));
  expect_gradient(avg_loss, x, dx, "global_avg_pool d_x");
  auto max_loss = [&] { global_max_pool_forward(y.v2(n, c), am, x.c4({n, c, h, w})); return weighted(y, r); };
  max_loss();
  global_max_pool_backward(dx.v4({n, c, h, w}), r.c2(n, c), am);
  expect_gradient(max_loss, x, dx, "global_max_pool d_x", 1e-3f);
  EXPECT_TRUE(dx.intact() && y.intact());
}

struct BnProblem {
  int64_t n = 3, c = 4, h = 3, w = 2;
  Buf x{n * c * h * w}, wt{c}, b{c}, r{n * c * h * w}, y{n * c * h * w}, mean{c}, rstd{c};
  Buf rm{c}, rv{c};
  BnProblem() { fill(); }
  BnProblem(int64_t n_, int64_t c_, int64_t h_, int64_t w_) : n(n_), c(c_), h(h_), w(w_) { fill(); }
  void fill() {
    x.randn(21, 2.0f), wt.randn(22), b.randn(23), r.randn(24), rm.randn(25);
    for (int64_t i = 0; i < c; ++i) rv[i] = 0.5f + float(i);
    for (int64_t i = 0; i < x.n; ++i) x[i] += float((i / (h * w)) % c);  // per-channel offsets
  }
  std::array<int64_t, 4> s() const { return {n, c, h, w}; }
};

TEST(BatchNorm2d, TrainingForwardStatisticsAndRunningUpdate) {
  BnProblem p;
  const Buf rm0 = p.rm, rv0 = p.rv;
  batch_norm2d_forward(p.y.v4(p.s()), p.mean.span(), p.rstd.span(), p.rm.span(), p.rv.span(),
                       p.x.c4(p.s()), p.wt.cspan(), p.b.cspan(), {.eps = 1e-5f, .momentum = 0.25f});
  const int64_t m = p.n * p.h * p.w;
  for (int64_t ch = 0; ch < p.c; ++ch) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < p.n; ++i)
      for (int64_t j = 0; j < p.h * p.w; ++j) s += p.x[(i * p.c + ch) * p.h * p.w + j];
    const double mu = s / double(m);
    for (int64_t i = 0; i < p.n; ++i)
      for (int64_t j = 0; j < p.h * p.w; ++j) q += std::pow(p.x[(i * p.c + ch) * p.h * p.w + j] - mu, 2);
    const double var = q / double(m);
    EXPECT_NEAR(p.mean[ch], mu, 1e-6 * (1 + std::abs(mu)));
    EXPECT_NEAR(p.rstd[ch], 1 / std::sqrt(var + 1e-5), 1e-5 / std::sqrt(var));
    EXPECT_NEAR(p.rm[ch], 0.75 * rm0[ch] + 0.25 * mu, 1e-6 * (1 + std::abs(mu)));
    EXPECT_NEAR(p.rv[ch], 0.75 * rv0[ch] + 0.25 * var * double(m) / double(m - 1), 1e-5 * (1 + var));
    const int64_t at = (1 * p.c + ch) * p.h * p.w + 2;
    EXPECT_NEAR(p.y[at], (p.x[at] - mu) / std::sqrt(var + 1e-5) * p.wt[ch] + p.b[ch], 1e-5);
  }
}

TEST(BatchNorm2d, FusedReluEqualsReluOfTheOutput) {
  for (bool training : {true, false}) {
    BnProblem a, b;
    batch_norm2d_forward(a.y.v4(a.s()), a.mean.span(), a.rstd.span(), a.rm.span(), a.rv.span(),
                         a.x.c4(a.s()), a.wt.cspan(), a.b.cspan(), {.training = training});
    batch_norm2d_forward(b.y.v4(b.s()), b.mean.span(), b.rstd.span(), b.rm.span(), b.rv.span(),
                         b.x.c4(b.s()), b.wt.cspan(), b.b.cspan(), {.training = training, .relu = true});
    int64_t zeroed = 0;
    for (int64_t i = 0; i < a.y.n; ++i) {
      ASSERT_EQ(b.y[i], std::max(a.y[i], 0.0f)) << i;
      zeroed += a.y[i] < 0;
    }
    EXPECT_GT(zeroed, 0);  // the data has negative outputs to clip
    EXPECT_EQ(a.rm.raw, b.rm.raw);
    EXPECT_EQ(a.rv.raw, b.rv.raw);
  }
}

// The stem's fusion: statistics only (y empty), then max_pool2d_affine_relu_forward with
// batch_norm2d_scale_shift: bitwise the statistics, running statistics, pooled values and argmax of
// batch_norm2d_forward with relu followed by max_pool2d_forward. A NaN in x takes its window, as
// in the unfused pool. Then the new arguments' errors.
TEST(BatchNorm2d, StatisticsThenAffineReluPoolEqualBatchNormReluThenPool) {
  for (const Pool2dOptions& po : kPoolings)
    for (bool training : {true, false}) {
      BnProblem a(3, 4, 6, 8), b(3, 4, 6, 8);
      a.x[7] = b.x[7] = NAN;
      if (training) a.x[7] = b.x[7] = 1.0f;  // a NaN would make the batch statistics NaN
      a.x[30] = b.x[30] = NAN;  // channel 1: in eval, only its windows see it
      if (training) a.x[30] = b.x[30] = 0.5f;
      batch_norm2d_forward(a.y.v4(a.s()), a.mean.span(), a.rstd.span(), a.rm.span(), a.rv.span(),
                           a.x.c4(a.s()), a.wt.cspan(), a.b.cspan(), {.training = training, .relu = true});
      const int64_t oh = pooled_size(a.h, po), ow = pooled_size(a.w, po), m = a.n * a.c * oh * ow;
      Buf pa(m), pb(m);
      std::vector<int32_t> ia(static_cast<size_t>(m)), ib(static_cast<size_t>(m));
      max_pool2d_forward(pa.v4({a.n, a.c, oh, ow}), ia, a.y.c4(a.s()), po);
      batch_norm2d_forward(View4{}, b.mean.span(), b.rstd.span(), b.rm.span(), b.rv.span(), b.x.c4(b.s()),
                           b.wt.cspan(), b.b.cspan(), {.training = training, .relu = true});
      Buf scale(b.c), shift(b.c);
      batch_norm2d_scale_shift(scale.span(), shift.span(), b.mean.cspan(), b.rstd.cspan(), b.wt.cspan(), b.b.cspan());
      max_pool2d_affine_relu_forward(pb.v4({b.n, b.c, oh, ow}), ib, b.x.c4(b.s()), scale.cspan(), shift.cspan(), po);
      EXPECT_EQ(a.mean.raw, b.mean.raw);
      EXPECT_EQ(a.rstd.raw, b.rstd.raw);
      EXPECT_EQ(a.rm.raw, b.rm.raw);
      EXPECT_EQ(a.rv.raw, b.rv.raw);
      EXPECT_EQ(ia, ib);
      for (int64_t i = 0; i < m; ++i)  // bitwise, NaN included
        ASSERT_EQ(std::memcmp(&pa.raw[size_t(i)], &pb.raw[size_t(i)], sizeof(float)), 0) << i;
      if (!training) {
        EXPECT_TRUE(std::any_of(pb.raw.begin(), pb.raw.end(), [](float v) { return std::isnan(v); }));
      }
    }
  BnProblem p(2, 3, 4, 4);
  Buf y(2 * 3 * 2 * 2), scale(3), shift(2);
  std::vector<int32_t> am(12);
  EXPECT_THROW(max_pool2d_affine_relu_forward(y.v4({2, 3, 2, 2}), am, p.x.c4(p.s()), scale.cspan(), shift.cspan(),
                                              {.kernel = 2}),
               Error);
  Buf sc(3), sh(3), mean(3), rstd(2);
  EXPECT_THROW(batch_norm2d_scale_shift(sc.span(), sh.span(), mean.cspan(), rstd.cspan(), {}, {}), Error);
}

// The stem's backward: batch_norm2d_max_pool_backward is bitwise max_pool2d_backward followed
// by batch_norm2d_backward (training and eval, with and without the ReLU mask, each pooling);
// then its argument errors.
TEST(BatchNorm2d, MaxPoolBackwardEqualsPoolBackwardThenBatchNormBackward) {
  for (const Pool2dOptions& po : kPoolings)
    for (bool training : {true, false})
      for (bool relu : {false, true}) {
        BnProblem p(3, 4, 6, 8);
        const BatchNormOptions o{.training = training, .relu = relu};
        batch_norm2d_forward(p.y.v4(p.s()), p.mean.span(), p.rstd.span(), p.rm.span(), p.rv.span(),
                             p.x.c4(p.s()), p.wt.cspan(), p.b.cspan(), o);
        const int64_t oh = pooled_size(p.h, po), ow = pooled_size(p.w, po), m = p.n * p.c * oh * ow;
        Buf pooled(m), d_pooled(m);
        d_pooled.randn(77);
        std::vector<int32_t> am(static_cast<size_t>(m));
        max_pool2d_forward(pooled.v4({p.n, p.c, oh, ow}), am, p.y.c4(p.s()), po);
        Buf dy(p.x.n), dx_a(p.x.n), dx_b(p.x.n), dw_a(p.c), db_a(p.c), dw_b(p.c), db_b(p.c);
        dw_a.randn(78), db_a.randn(79);
        dw_b.raw = dw_a.raw, db_b.raw = db_a.raw;  // both add into the same starting values
        max_pool2d_backward(dy.v4(p.s()), d_pooled.c4({p.n, p.c, oh, ow}), am);
        batch_norm2d_backward(dx_a.v4(p.s()), dw_a.span(), db_a.span(), dy.c4(p.s()), p.x.c4(p.s()), p.wt.cspan(),
                              p.b.cspan(), p.mean.cspan(), p.rstd.cspan(), o);
        batch_norm2d_max_pool_backward(dx_b.v4(p.s()), dw_b.span(), db_b.span(), d_pooled.c4({p.n, p.c, oh, ow}),
                                       am, p.x.c4(p.s()), p.wt.cspan(), p.b.cspan(), p.mean.cspan(),
                                       p.rstd.cspan(), o);
        EXPECT_EQ(dx_a.raw, dx_b.raw);
        EXPECT_EQ(dw_a.raw, dw_b.raw);
        EXPECT_EQ(db_a.raw, db_b.raw);
      }
  BnProblem p(2, 3, 4, 4);
  Buf dp(2 * 3 * 2 * 2), dx(p.x.n);
  std::vector<int32_t> am(24, 0);
  auto call = [&](std::span<const int32_t> a, ConstView4 d) {
    batch_norm2d_max_pool_backward(dx.v4(p.s()), {}, {}, d, a, p.x.c4(p.s()), {}, {}, p.mean.cspan(),
                                   p.rstd.cspan(), {});
  };
  EXPECT_NO_THROW(call(am, dp.c4({2, 3, 2, 2})));
  EXPECT_THROW(call(std::span<const int32_t>(am).first(23), dp.c4({2, 3, 2, 2})), Error);  // argmax size
  am[5] = 16;                                                                              // outside the plane
  EXPECT_THROW(call(am, dp.c4({2, 3, 2, 2})), Error);
  am[5] = 0;
  EXPECT_THROW(call(am, dp.c4({2, 2, 2, 2})), Error);  // d_pooled's channels
  // d_pooled overlapping d_x (a view into its second half): refused, not read while written.
  EXPECT_THROW(call(am, ConstView4::contiguous(dx.data() + 10, {2, 3, 2, 2})), Error);
}

// The fused backward masks d_y where the forward's output was not > 0, from x alone: bitwise the
// unfused backward of d_y masked by the fused forward's y. 7×7 planes: several vectors and a tail.
TEST(BatchNorm2d, FusedReluBackwardEqualsMaskingByTheOutput) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    BnProblem p(3, 5, 7, 7);
    const BatchNormOptions fused{.training = training, .relu = true};
    batch_norm2d_forward(p.y.v4(p.s()), p.mean.span(), p.rstd.span(), p.rm.span(), p.rv.span(),
                         p.x.c4(p.s()), p.wt.cspan(), p.b.cspan(), fused);
    Buf masked = p.r;
    int64_t zeroed = 0;
    for (int64_t i = 0; i < p.y.n; ++i)
      if (!(p.y[i] > 0.0f)) masked[i] = 0.0f, ++zeroed;
    ASSERT_GT(zeroed, 0);
    ASSERT_LT(zeroed, p.y.n);
    Buf dx1(p.x.n), dw1(p.c), db1(p.c), dx2(p.x.n), dw2(p.c), db2(p.c);
    batch_norm2d_backward(dx1.v4(p.s()), dw1.span(), db1.span(), p.r.c4(p.s()), p.x.c4(p.s()),
                          p.wt.cspan(), p.b.cspan(), p.mean.cspan(), p.rstd.cspan(), fused);
    batch_norm2d_backward(dx2.v4(p.s()), dw2.span(), db2.span(), masked.c4(p.s()), p.x.c4(p.s()),
                          p.wt.cspan(), p.b.cspan(), p.mean.cspan(), p.rstd.cspan(),
                          {.training = training});
    EXPECT_EQ(dx1.raw, dx2.raw);
    EXPECT_EQ(dw1.raw, dw2.raw);
    EXPECT_EQ(db1.raw, db2.raw);
    // In place (d_x aliasing d_y) gives the same d_x.
    Buf inplace = p.r, dw3(p.c), db3(p.c);
    batch_norm2d_backward(inplace.v4(p.s()), dw3.span(), db3.span(), inplace.c4(p.s()), p.x.c4(p.s()),
                          p.wt.cspan(), p.b.cspan(), p.mean.cspan(), p.rstd.cspan(), fused);
    EXPECT_EQ(inplace.raw, dx1.raw);
  }
}

TEST(BatchNorm2d, GradientsMatchFiniteDifferencesTrainingAndEval) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    BnProblem p;
    const BatchNormOptions o{.training = training};
    Buf rm = p.rm, rv = p.rv;
    auto loss = [&] {
      Buf m2 = rm, v2 = rv;  // the running statistics must not drift between evaluations
      batch_norm2d_forward(p.y.v4(p.s()), p.mean.span(), p.rstd.span(), m2.span(), v2.span(),
                           p.x.c4(p.s()), p.wt.cspan(), p.b.cspan(), o);
      return weighted(p.y, p.r);
    };
    loss();
    Buf dx(p.x.n), dw(p.c), db(p.c);
    batch_norm2d_backward(dx.v4(p.s()), dw.span(), db.span(), p.r.c4(p.s()), p.x.c4(p.s()),
                          p.wt.cspan(), p.b.cspan(), p.mean.cspan(), p.rstd.cspan(), o);
    expect_gradient(loss, p.x, dx, "d_x", 1e-3f);
    expect_gradient(loss, p.wt, dw, "d_w");
    expect_gradient(loss, p.b, db, "d_b");
    if (!training) {
      EXPECT_EQ(rm.raw, p.rm.raw);
    }
  }
}

TEST(BatchNorm2d, BitwiseIdenticalForAnyThreadCountAndBadArguments) {
  BnProblem a, b;
  {
    ThreadCountScope one(1);
    batch_norm2d_forward(a.y.v4(a.s()), a.mean.span(), a.rstd.span(), a.rm.span(), a.rv.span(), a.x.c4(a.s()), a.wt.cspan(), a.b.cspan());
  }
  {
    ThreadCountScope two(2);
    batch_norm2d_forward(b.y.v4(b.s()), b.mean.span(), b.rstd.span(), b.rm.span(), b.rv.span(), b.x.c4(b.s()), b.wt.cspan(), b.b.cspan());
  }
  EXPECT_EQ(a.y.raw, b.y.raw);
  EXPECT_THROW(batch_norm2d_forward(a.y.v4(a.s()), a.mean.span(), a.rstd.span(), {}, {}, a.x.c4(a.s()), a.wt.cspan(), a.b.cspan(), {.training = false}), Error);
  EXPECT_THROW(batch_norm2d_forward(a.y.v4(a.s()), a.mean.span(), a.rstd.span(), {}, {}, a.x.c4(a.s()), a.wt.cspan(), a.b.cspan(), {.momentum = 2}), Error);
  Buf one(4);
  Buf m1(4), r1(4);
  EXPECT_THROW(batch_norm2d_forward(one.v4({1, 4, 1, 1}), m1.span(), r1.span(), {}, {}, one.c4({1, 4, 1, 1}), {}, {}), Error);
}

}  // namespace
}  // namespace attnkit
