// SE block and CBAM: forward against the formulas evaluated here in double, every gradient
// (input and all parameters) against central finite differences, the += / = contract, and
// argument errors, and CBAM's results bitwise the same for any thread count. CBAM's finite
// differences skip the rare elements whose perturbation moves a max (checked by comparing the
// saved argmax indices).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/cbam.hpp"
#include "attnkit/nn/se_block.hpp"
#include "nn/vision_testing.hpp"

namespace attnkit {
namespace {

using vision_testing::Buf;
using vision_testing::expect_gradient;
using vision_testing::weighted;

double sig(double v) { return 1 / (1 + std::exp(-v)); }

struct SeProblem {
  int64_t n = 2, c = 6, r = 3, h = 3, w = 4;
  Buf x{n * c * h * w}, w1{r * c}, b1{r}, w2{c * r}, b2{c}, dy{n * c * h * w}, y{n * c * h * w};
  SeProblem() { x.randn(31), w1.randn(32), b1.randn(33, 0.3f), w2.randn(34), b2.randn(35), dy.randn(36); }
  std::array<int64_t, 4> s() const { return {n, c, h, w}; }
  SeWeights weights() const { return {w1.c2(r, c), b1.cspan(), w2.c2(c, r), b2.cspan()}; }
};

TEST(SeBlock, ForwardMatchesFormula) {
  SeProblem p;
  SeCache cache;
  se_block_forward(p.y.v4(p.s()), cache, p.x.c4(p.s()), p.weights());
  const int64_t hw = p.h * p.w;
  for (int64_t b = 0; b < p.n; ++b) {
    std::vector<double> s(size_t(p.c)), z(size_t(p.r));
    for (int64_t c = 0; c < p.c; ++c) {
      for (int64_t j = 0; j < hw; ++j) s[size_t(c)] += p.x[(b * p.c + c) * hw + j];
      s[size_t(c)] /= double(hw);
    }
    for (int64_t k = 0; k < p.r; ++k) {
      double a = p.b1[k];
      for (int64_t c = 0; c < p.c; ++c) a += p.w1[k * p.c + c] * s[size_t(c)];
      z[size_t(k)] = std::max(a, 0.0);
    }
    for (int64_t c = 0; c < p.c; ++c) {
      double u = p.b2[c];
      for (int64_t k = 0; k < p.r; ++k) u += p.w2[c * p.r + k] * z[size_t(k)];
      for (int64_t j = 0; j < hw; ++j) {
        const int64_t i = (b * p.c + c) * hw + j;
        EXPECT_NEAR(p.y[i], p.x[i] * sig(u), 1e-5 * (1 + std::abs(p.x[i])));
      }
    }
  }
  EXPECT_TRUE(p.y.intact());
}

TEST(SeBlock, GradientsMatchFiniteDifferences) {
  SeProblem p;
  SeCache cache;
  auto loss = [&] {
    SeCache c2;
    se_block_forward(p.y.v4(p.s()), c2, p.x.c4(p.s()), p.weights());
    return weighted(p.y, p.dy);
  };
  se_block_forward(p.y.v4(p.s()), cache, p.x.c4(p.s()), p.weights());
  Buf dx(p.x.n), dw1(p.w1.n), db1(p.b1.n), dw2(p.w2.n), db2(p.b2.n);
  se_block_backward(dx.v4(p.s()), {dw1.v2(p.r, p.c), db1.span(), dw2.v2(p.c, p.r), db2.span()},
                    p.dy.c4(p.s()), p.x.c4(p.s()), p.weights(), cache);
  expect_gradient(loss, p.x, dx, "d_x");
  expect_gradient(loss, p.w1, dw1, "d_w1");
  expect_gradient(loss, p.b1, db1, "d_b1");
  expect_gradient(loss, p.w2, dw2, "d_w2");
  expect_gradient(loss, p.b2, db2, "d_b2");
  // += contract: a second backward doubles the parameter gradients and reassigns d_x.
  const Buf dw1_once = dw1, dx_once = dx;
  se_block_backward(dx.v4(p.s()), {dw1.v2(p.r, p.c), {}, {}, {}}, p.dy.c4(p.s()), p.x.c4(p.s()),
                    p.weights(), cache);
  for (int64_t i = 0; i < dw1.n; ++i) EXPECT_FLOAT_EQ(dw1[i], 2 * dw1_once[i]);
  EXPECT_EQ(dx.raw, dx_once.raw);
}

struct CbamProblem {
  int64_t n = 2, c = 4, r = 2, h = 4, w = 5, k = 3;
  Buf x{n * c * h * w}, w1{r * c}, b1{r}, w2{c * r}, b2{c}, ws{2 * k * k}, bs{1};
  Buf dy{n * c * h * w}, y{n * c * h * w};
  CbamProblem() : CbamProblem(2, 4, 2, 4, 5, 3) {}
  CbamProblem(int64_t n_, int64_t c_, int64_t r_, int64_t h_, int64_t w_, int64_t k_)
      : n(n_), c(c_), r(r_), h(h_), w(w_), k(k_) {
    x.randn(41), w1.randn(42), b1.randn(43, 0.3f), w2.randn(44), b2.randn(45), ws.randn(46, 0.5f),
        bs.randn(47), dy.randn(48);
  }
  std::array<int64_t, 4> s() const { return {n, c, h, w}; }
  CbamWeights weights() const {
    return {w1.c2(r, c), b1.cspan(), w2.c2(c, r), b2.cspan(), ws.c4({1, 2, k, k}), bs.cspan()};
  }
};

TEST(Cbam, ForwardMatchesFormula) {
  CbamProblem p;
  CbamCache cache;
  cbam_forward(p.y.v4(p.s()), cache, p.x.c4(p.s()), p.weights());
  const int64_t hw = p.h * p.w, c = p.c;
  for (int64_t b = 0; b < p.n; ++b) {
    auto mlp = [&](const std::vector<double>& v) {
      std::vector<double> z(static_cast<size_t>(p.r)), out(static_cast<size_t>(c));
      for (int64_t k = 0; k < p.r; ++k) {
        double a = p.b1[k];
        for (int64_t j = 0; j < c; ++j) a += p.w1[k * c + j] * v[size_t(j)];
        z[size_t(k)] = std::max(a, 0.0);
      }
      for (int64_t j = 0; j < c; ++j) {
        out[size_t(j)] = p.b2[j];
        for (int64_t k = 0; k < p.r; ++k) out[size_t(j)] += p.w2[j * p.r + k] * z[size_t(k)];
      }
      return out;
    };
    std::vector<double> avg(size_t(c), 0.0), mx(size_t(c), -INFINITY);
    for (int64_t j = 0; j < c; ++j)
      for (int64_t q = 0; q < hw; ++q) {
        avg[size_t(j)] += p.x[(b * c + j) * hw + q] / double(hw);
        mx[size_t(j)] = std::max(mx[size_t(j)], double(p.x[(b * c + j) * hw + q]));
      }
    const auto ma = mlp(avg), mm = mlp(mx);
    std::vector<double> x1(static_cast<size_t>(c * hw)), d0(static_cast<size_t>(hw)), d1(static_cast<size_t>(hw), -INFINITY);
    for (int64_t j = 0; j < c; ++j)
      for (int64_t q = 0; q < hw; ++q) {
        const double v = p.x[(b * c + j) * hw + q] * sig(ma[size_t(j)] + mm[size_t(j)]);
        x1[size_t(j * hw + q)] = v;
        d0[size_t(q)] += v / double(c);
        d1[size_t(q)] = std::max(d1[size_t(q)], v);
      }
    for (int64_t i = 0; i < p.h; ++i)
      for (int64_t jj = 0; jj < p.w; ++jj) {
        double s = p.bs[0];
        for (int64_t u = 0; u < p.k; ++u)
          for (int64_t v = 0; v < p.k; ++v) {
            const int64_t hi = i - p.k / 2 + u, wi = jj - p.k / 2 + v;
            if (hi < 0 || hi >= p.h || wi < 0 || wi >= p.w) continue;
            s += p.ws[u * p.k + v] * d0[size_t(hi * p.w + wi)] + p.ws[p.k * p.k + u * p.k + v] * d1[size_t(hi * p.w + wi)];
          }
        for (int64_t j = 0; j < c; ++j) {
          const int64_t q = i * p.w + jj;
          EXPECT_NEAR(p.y[(b * c + j) * hw + q], x1[size_t(j * hw + q)] * sig(s), 1e-5);
        }
      }
  }
}

TEST(Cbam, GradientsMatchFiniteDifferences) {
  CbamProblem p;
  CbamCache cache, probe;
  cbam_forward(p.y.v4(p.s()), cache, p.x.c4(p.s()), p.weights());
  auto loss = [&] {
    cbam_forward(p.y.v4(p.s()), probe, p.x.c4(p.s()), p.weights());
    return weighted(p.y, p.dy);
  };
  auto same_branch = [&] {
    return probe.max_index == cache.max_index && probe.channel_argmax == cache.channel_argmax;
  };
  Buf dx(p.x.n), dw1(p.w1.n), db1(p.b1.n), dw2(p.w2.n), db2(p.b2.n), dws(p.ws.n), dbs(1);
  cbam_backward(dx.v4(p.s()),
                {dw1.v2(p.r, p.c), db1.span(), dw2.v2(p.c, p.r), db2.span(), dws.v4({1, 2, p.k, p.k}), dbs.span()},
                p.dy.c4(p.s()), p.x.c4(p.s()), p.weights(), cache);
  expect_gradient(loss, p.x, dx, "d_x", 1e-2f, same_branch);
  expect_gradient(loss, p.w1, dw1, "d_w1", 1e-2f, same_branch);
  expect_gradient(loss, p.b1, db1, "d_b1", 1e-2f, same_branch);
  expect_gradient(loss, p.w2, dw2, "d_w2", 1e-2f, same_branch);
  expect_gradient(loss, p.b2, db2, "d_b2", 1e-2f, same_branch);
  expect_gradient(loss, p.ws, dws, "d_ws", 1e-2f, same_branch);
  expect_gradient(loss, p.bs, dbs, "d_bs", 1e-2f, same_branch);
  EXPECT_TRUE(dx.intact() && dws.intact());
}

TEST(Cbam, BitwiseIdenticalForAnyThreadCount) {
  // Enough images and planes for the pooling, gate and gradient passes to split across threads.
  CbamProblem p(9, 16, 2, 7, 7, 7);
  std::vector<float> first;
  for (int t : {1, 2}) {
    const ThreadCountScope threads(t);
    CbamCache cache;
    Buf y(p.y.n), dx(p.x.n), dw1(p.w1.n), db1(p.b1.n), dw2(p.w2.n), db2(p.b2.n), dws(p.ws.n), dbs(1);
    cbam_forward(y.v4(p.s()), cache, p.x.c4(p.s()), p.weights());
    cbam_backward(dx.v4(p.s()),
                  {dw1.v2(p.r, p.c), db1.span(), dw2.v2(p.c, p.r), db2.span(), dws.v4({1, 2, p.k, p.k}), dbs.span()},
                  p.dy.c4(p.s()), p.x.c4(p.s()), p.weights(), cache);
    std::vector<float> all;
    for (const Buf* b : {&y, &dx, &dw1, &db1, &dw2, &db2, &dws, &dbs}) all.insert(all.end(), b->raw.begin(), b->raw.end());
    if (t == 1) first = all;
    else EXPECT_EQ(all, first);
  }
}

// cbam_forward without y, then cbam_residual_relu: max(x1 ⊙ a_s + shortcut, 0) to the rounding
// of one product and one sum (the compiler may fuse them), the full forward's y where it is the
// same; and in place over the shortcut.
TEST(Cbam, ResidualReluEqualsOutputPlusShortcutThenRelu) {
  CbamProblem p(3, 8, 2, 5, 6, 3);
  Buf sc(p.x.n), o(p.x.n);
  sc.randn(50);
  CbamCache full, part;
  cbam_forward(p.y.v4(p.s()), full, p.x.c4(p.s()), p.weights());
  cbam_forward(View4{}, part, p.x.c4(p.s()), p.weights());
  cbam_residual_relu(o.v4(p.s()), part, sc.c4(p.s()));
  int64_t clipped = 0;
  const int64_t hw = p.h * p.w;
  for (int64_t i = 0; i < o.n; ++i) {
    const double prod = double(part.x1.data()[i]) * double(part.spatial_gate.data()[(i / (p.c * hw)) * hw + i % hw]);
    const double ref = std::max(prod + double(sc[i]), 0.0);
    ASSERT_NEAR(o[i], ref, 0x1p-23 * (std::abs(prod) + std::abs(double(sc[i])))) << i;
    ASSERT_EQ(p.y[i], full.x1.data()[i] * full.spatial_gate.data()[(i / (p.c * hw)) * hw + i % hw]) << i;
    clipped += ref == 0.0;
  }
  EXPECT_GT(clipped, 0);
  cbam_residual_relu(sc.v4(p.s()), part, sc.c4(p.s()));
  EXPECT_EQ(sc.raw, o.raw);
  EXPECT_THROW(cbam_residual_relu(o.v4({3, 8, 6, 5}), part, sc.c4(p.s())), Error);
  EXPECT_THROW(cbam_residual_relu(o.v4(p.s()), CbamCache{}, sc.c4(p.s())), Error);
}

TEST(Cbam, BadArguments) {
  CbamProblem p;
  CbamCache cache;
  CbamWeights w = p.weights();
  w.ws = p.ws.c4({1, 2, 3, 3});
  w.ws.shape = {1, 2, 2, 2};
  EXPECT_THROW(cbam_forward(p.y.v4(p.s()), cache, p.x.c4(p.s()), w), Error);  // even kernel
  w = p.weights();
  w.w2 = p.w2.c2(p.r, p.c);
  EXPECT_THROW(cbam_forward(p.y.v4(p.s()), cache, p.x.c4(p.s()), w), Error);
  EXPECT_THROW(cbam_forward(View4::contiguous(const_cast<float*>(p.x.data()), p.s()), cache, p.x.c4(p.s()), p.weights()), Error);
  EXPECT_THROW(cbam_backward(p.y.v4(p.s()), {}, p.dy.c4(p.s()), p.x.c4(p.s()), p.weights(), CbamCache{}), Error);
}

}  // namespace
}  // namespace attnkit
