// Multi-scale deformable attention: fast path vs the float64 reference (single-pixel levels,
// points far outside, on borders and pixel centres, non-finite locations), the reference vs
// central finite differences for all three gradients, bitwise determinism across thread counts,
// guard bands, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attention/ms_deform_attn.hpp"
#include "attnkit/core/parallel.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using nn_testing::GradCheck;
using nn_testing::kU;

constexpr int64_t kGuard = 8;
constexpr float kSentinel = -777.0f;

// A float buffer with sentinel guard bands on both sides.
struct Buf {
  std::vector<float> raw;
  // n elements set to `fill` (outputs start as junk so that "assigned" is tested).
  explicit Buf(int64_t n = 0, float fill = 0.0f) : raw(size_t(n + 2 * kGuard), kSentinel) {
    std::fill(raw.begin() + kGuard, raw.end() - kGuard, fill);
  }
  float* data() { return raw.data() + kGuard; }
  const float* data() const { return raw.data() + kGuard; }
  int64_t size() const { return int64_t(raw.size()) - 2 * kGuard; }
  float& operator[](int64_t i) { return data()[i]; }
  float operator[](int64_t i) const { return data()[i]; }
  bool intact() const {
    for (int64_t i = 0; i < kGuard; ++i)
      if (raw[size_t(i)] != kSentinel || raw[raw.size() - 1 - size_t(i)] != kSentinel) return false;
    return true;
  }
};

// Where sampling points go.
enum class Points { kRandom, kSpecial, kSmooth };

struct DeformProblem {
  int64_t b, q, h, dh, p;
  std::vector<std::pair<int64_t, int64_t>> lv;  // (H_l, W_l)
  int64_t s = 0;
  std::vector<int64_t> shapes, starts;
  Buf value, loc, w, d_out;

  DeformProblem(int64_t b_, int64_t q_, int64_t h_, int64_t dh_, int64_t p_,
          std::vector<std::pair<int64_t, int64_t>> levels, Points pts, uint32_t seed)
      : b(b_), q(q_), h(h_), dh(dh_), p(p_), lv(std::move(levels)) {
    for (auto [hl, wl] : lv) {
      shapes.push_back(hl);
      shapes.push_back(wl);
      starts.push_back(s);
      s += hl * wl;
    }
    std::mt19937 rng(seed);
    std::normal_distribution<float> n01;
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    value = Buf(b * s * h * dh);
    for (int64_t i = 0; i < value.size(); ++i) value[i] = n01(rng);
    w = Buf(b * q * h * nlv() * p);
    for (int64_t i = 0; i < w.size(); ++i) w[i] = uni(rng);
    d_out = Buf(b * q * h * dh);
    for (int64_t i = 0; i < d_out.size(); ++i) d_out[i] = n01(rng);
    loc = Buf(w.size() * 2);
    for (int64_t i = 0; i < w.size(); ++i) {
      const int64_t l = (i / p) % nlv();
      const auto [hl, wl] = lv[size_t(l)];
      loc[2 * i] = coordinate(pts, wl, rng);
      loc[2 * i + 1] = coordinate(pts, hl, rng);
    }
  }
  int64_t nlv() const { return int64_t(lv.size()); }

  // One normalised coordinate on an axis of n pixels.
  static float coordinate(Points pts, int64_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    const float fn = float(n);
    if (pts == Points::kRandom) return -0.3f + 1.6f * uni(rng);
    if (pts == Points::kSmooth) {
      // pixel coordinate c = cell + frac with frac in [0.2, 0.8]: 1e-2 steps (≤ 0.08 pixels for
      // n ≤ 8) never cross a kink of the interpolant; cell -1 reaches the border partly outside.
      const int64_t cell = int64_t(std::uniform_int_distribution<int64_t>(-1, n - 1)(rng));
      return (float(cell) + 0.2f + 0.6f * uni(rng) + 0.5f) / fn;
    }
    const int64_t i = std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
    switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
      case 0: return 0.0f;                          // border (pixel coordinate -0.5)
      case 1: return 1.0f;                          // border (W - 0.5)
      case 2: return (float(i) + 0.5f) / fn;        // pixel centre (a kink)
      case 3: return -0.5f / fn;                    // pixel coordinate exactly -1
      case 4: return (fn + 0.5f) / fn;              // pixel coordinate exactly W: all outside
      case 5: return 1e6f;                          // far outside
      case 6: return -3e30f;                        // very far outside
      case 7: return float(i) / fn;                 // pixel edge
      default: return -0.3f + 1.6f * uni(rng);
    }
  }

  MsDeformAttnArgs args(Buf& out) const {
    MsDeformAttnArgs a;
    a.value = View<const float, 4>::contiguous(value.data(), {b, s, h, dh});
    a.spatial_shapes = shapes;
    a.level_start_index = starts;
    a.sampling_locations = View<const float, 6>::contiguous(loc.data(), {b, q, h, nlv(), p, 2});
    a.attention_weights = View<const float, 5>::contiguous(w.data(), {b, q, h, nlv(), p});
    a.out = View3::contiguous(out.data(), {b, q, h * dh});
    return a;
  }
};

struct Grads {
  Buf dv, dloc, dw;
  explicit Grads(const DeformProblem& pr)
      : dv(pr.value.size(), 3.5f), dloc(pr.loc.size(), 3.5f), dw(pr.w.size(), 3.5f) {}
  MsDeformAttnGrads view(const DeformProblem& pr) {
    return {.d_out = ConstView3::contiguous(pr.d_out.data(), {pr.b, pr.q, pr.h * pr.dh}),
            .d_value = View<float, 4>::contiguous(dv.data(), {pr.b, pr.s, pr.h, pr.dh}),
            .d_sampling_locations =
                View<float, 6>::contiguous(dloc.data(), {pr.b, pr.q, pr.h, pr.nlv(), pr.p, 2}),
            .d_attention_weights =
                View<float, 5>::contiguous(dw.data(), {pr.b, pr.q, pr.h, pr.nlv(), pr.p})};
  }
};

Buf forward(const DeformProblem& pr, void (*fn)(const MsDeformAttnArgs&)) {
  Buf out(pr.b * pr.q * pr.h * pr.dh, 3.5f);
  fn(pr.args(out));
  return out;
}

Grads backward(const DeformProblem& pr,
               void (*fn)(const MsDeformAttnArgs&, const MsDeformAttnGrads&)) {
  Grads g(pr);
  Buf unused;
  MsDeformAttnArgs a = pr.args(unused);
  a.out = {};
  fn(a, g.view(pr));
  return g;
}

void expect_within(const Buf& got, const Buf& want, const std::function<double(int64_t)>& bar,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_TRUE(got.intact()) << what << ": guard band overwritten";
  for (int64_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - double(want[i]));
    ASSERT_TRUE(err <= bar(i)) << what << "[" << i << "]: got " << got[i] << " want " << want[i]
                               << " bar " << bar(i);
  }
}

// Per-point magnitudes that bound the float rounding of d_w and d_loc: Σ_k Σ_d |g_d·V_k,d| over
// the in-map corners k (times |w|·W or |w|·H for the locations).
std::vector<double> point_magnitudes(const DeformProblem& pr) {
  std::vector<double> mag(size_t(pr.w.size()), 0.0);
  for (int64_t i = 0; i < pr.w.size(); ++i) {
    const int64_t l = (i / pr.p) % pr.nlv(), hh = (i / (pr.p * pr.nlv())) % pr.h;
    const int64_t bq = i / (pr.p * pr.nlv() * pr.h), bb = bq / pr.q;
    const auto [hl, wl] = pr.lv[size_t(l)];
    const BilinearCorners c = bilinear_corners(pr.loc[2 * i], pr.loc[2 * i + 1], hl, wl);
    if (!c.valid) continue;
    for (int k = 0; k < 4; ++k) {
      const int64_t yy = c.y0 + k / 2, xx = c.x0 + k % 2;
      if (yy < 0 || yy >= hl || xx < 0 || xx >= wl) continue;
      const int64_t row = pr.starts[size_t(l)] + yy * wl + xx;
      for (int64_t d = 0; d < pr.dh; ++d)
        mag[size_t(i)] += std::abs(double(pr.d_out[(bq * pr.h + hh) * pr.dh + d]) *
                                   double(pr.value[((bb * pr.s + row) * pr.h + hh) * pr.dh + d]));
    }
  }
  return mag;
}

void check_fast_vs_reference(const DeformProblem& pr, const std::string& what) {
  const Buf ref = forward(pr, &ms_deform_attn_reference);
  const Buf fast = forward(pr, &ms_deform_attn);
  // Magnitudes: the reference on |value| (weights and β are >= 0).
  DeformProblem abs_pr = pr;
  for (int64_t i = 0; i < abs_pr.value.size(); ++i) abs_pr.value[i] = std::abs(pr.value[i]);
  const Buf mag = forward(abs_pr, &ms_deform_attn_reference);
  const double k_fwd = double(4 * pr.nlv() * pr.p + 4);
  expect_within(fast, ref, [&](int64_t i) { return k_fwd * kU * mag[i]; }, what + " out");

  const Grads gr = backward(pr, &ms_deform_attn_reference_backward);
  const Grads gf = backward(pr, &ms_deform_attn_backward);
  for (int64_t i = 0; i < abs_pr.d_out.size(); ++i) abs_pr.d_out[i] = std::abs(pr.d_out[i]);
  const Grads gm = backward(abs_pr, &ms_deform_attn_reference_backward);
  const double k_dv = double(4 * pr.q * pr.nlv() * pr.p + 4);
  expect_within(gf.dv, gr.dv, [&](int64_t i) { return k_dv * kU * gm.dv[i]; }, what + " d_value");
  const std::vector<double> pm = point_magnitudes(pr);
  const double k_dot = double(pr.dh + 8);
  expect_within(gf.dw, gr.dw, [&](int64_t i) { return k_dot * kU * pm[size_t(i)]; },
                what + " d_attention_weights");
  expect_within(gf.dloc, gr.dloc, [&](int64_t i) {
    const int64_t pt = i / 2, l = (pt / pr.p) % pr.nlv();
    const auto [hl, wl] = pr.lv[size_t(l)];
    const double side = double(i % 2 == 0 ? wl : hl);
    return k_dot * kU * std::abs(double(pr.w[pt])) * side * 2 * pm[size_t(pt)];
  }, what + " d_sampling_locations");
}

TEST(MsDeformAttn, FastMatchesReferenceRandomPoints) {
  check_fast_vs_reference(DeformProblem(2, 7, 3, 17, 4, {{5, 7}, {3, 4}, {1, 2}}, Points::kRandom, 1),
                          "random Dh=17");
  check_fast_vs_reference(DeformProblem(1, 13, 2, 32, 3, {{8, 8}, {4, 4}}, Points::kRandom, 2),
                          "random Dh=32");
  check_fast_vs_reference(DeformProblem(1, 5, 1, 1, 2, {{3, 5}}, Points::kRandom, 3), "Dh=1");
  check_fast_vs_reference(DeformProblem(2, 3, 4, 40, 2, {{6, 3}, {2, 2}}, Points::kRandom, 4),
                          "random Dh=40");
}

TEST(MsDeformAttn, FastMatchesReferenceSpecialPoints) {
  // Single-pixel levels, borders, pixel centres and edges, far outside, pixel coordinate -1 and W.
  check_fast_vs_reference(DeformProblem(2, 9, 2, 16, 4, {{1, 1}, {4, 4}, {1, 3}, {7, 1}},
                                  Points::kSpecial, 5),
                          "special");
  check_fast_vs_reference(DeformProblem(1, 17, 3, 7, 3, {{5, 8}, {1, 1}}, Points::kSpecial, 6),
                          "special Dh=7");
}

TEST(MsDeformAttn, EmptyQueriesZeroValueGradient) {
  const DeformProblem pr(1, 0, 2, 8, 2, {{2, 3}}, Points::kRandom, 7);
  const Grads g = backward(pr, &ms_deform_attn_backward);
  for (int64_t i = 0; i < g.dv.size(); ++i) EXPECT_EQ(g.dv[i], 0.0f);
  EXPECT_TRUE(g.dv.intact());
}

TEST(MsDeformAttn, NonFiniteLocationsSampleNothing) {
  DeformProblem pr(1, 2, 1, 5, 2, {{3, 3}}, Points::kRandom, 8);
  pr.loc[0] = NAN;
  pr.loc[3] = INFINITY;
  pr.loc[4] = -INFINITY;
  for (auto fwd : {&ms_deform_attn, &ms_deform_attn_reference}) {
    const Buf out = forward(pr, fwd);
    for (int64_t i = 0; i < out.size(); ++i) EXPECT_TRUE(std::isfinite(out[i]));
  }
  for (auto bwd : {&ms_deform_attn_backward, &ms_deform_attn_reference_backward}) {
    const Grads g = backward(pr, bwd);
    for (int pt : {0, 1, 2}) {  // the three points holding a non-finite coordinate
      EXPECT_EQ(g.dw[pt], 0.0f);
      EXPECT_EQ(g.dloc[2 * pt], 0.0f);
      EXPECT_EQ(g.dloc[2 * pt + 1], 0.0f);
    }
    EXPECT_NE(g.dw[3], 0.0f);  // a finite point in the map still gets its gradient
  }
}

TEST(MsDeformAttn, ReferenceMatchesFiniteDifferences) {
  DeformProblem pr(2, 3, 2, 3, 2, {{3, 4}, {1, 1}, {2, 5}}, Points::kSmooth, 9);
  const Grads g = backward(pr, &ms_deform_attn_reference_backward);
  auto loss = [&] {
    const Buf out = forward(pr, &ms_deform_attn_reference);
    double sum = 0;
    for (int64_t i = 0; i < out.size(); ++i) sum += double(out[i]) * double(pr.d_out[i]);
    return sum;
  };
  auto sweep = [&](Buf& x, const Buf& gx, const std::string& what) {
    GradCheck c;
    for (int64_t i = 0; i < x.size(); ++i) c.add(nn_testing::numeric_grad(loss, &x[i]), gx[i]);
    EXPECT_GT(c.scale, 0.1) << what << ": gradient identically zero";
    c.expect_ok(what);
  };
  sweep(pr.value, g.dv, "d_value");
  sweep(pr.w, g.dw, "d_attention_weights");
  sweep(pr.loc, g.dloc, "d_sampling_locations");
}

TEST(MsDeformAttn, BitwiseIdenticalAcrossThreadCounts) {
  // B·H = 2 with Dh = 40: 1 thread uses one channel block per (b, h), 3 threads two.
  const DeformProblem pr(1, 33, 2, 40, 4, {{6, 5}, {3, 2}, {1, 1}}, Points::kSpecial, 10);
  std::vector<Buf> outs;
  std::vector<Grads> grads;
  for (int t : {1, 2, 3}) {
    ThreadCountScope scope(t);
    outs.push_back(forward(pr, &ms_deform_attn));
    grads.push_back(backward(pr, &ms_deform_attn_backward));
  }
  for (size_t i = 1; i < outs.size(); ++i) {
    EXPECT_EQ(outs[i].raw, outs[0].raw);
    EXPECT_EQ(grads[i].dv.raw, grads[0].dv.raw);
    EXPECT_EQ(grads[i].dloc.raw, grads[0].dloc.raw);
    EXPECT_EQ(grads[i].dw.raw, grads[0].dw.raw);
  }
}

TEST(MsDeformAttn, RejectsBadArguments) {
  const DeformProblem pr(1, 2, 2, 4, 2, {{2, 3}, {1, 2}}, Points::kRandom, 11);
  Buf out(pr.b * pr.q * pr.h * pr.dh);
  auto run = [&](const std::function<void(MsDeformAttnArgs&)>& spoil) {
    return [&pr, &out, spoil] {
      MsDeformAttnArgs a = pr.args(out);
      spoil(a);
      ms_deform_attn(a);
    };
  };
  const std::vector<int64_t> odd = {2, 3, 1}, zero = {2, 3, 0, 2}, big = {2, 3, 2, 2};
  const std::vector<int64_t> bad_start = {0, 5}, short_start = {0};
  expect_error(run([&](auto& a) { a.spatial_shapes = odd; }), "spatial_shapes");
  expect_error(run([&](auto& a) { a.spatial_shapes = zero; }), "spatial_shapes[1]");
  expect_error(run([&](auto& a) { a.spatial_shapes = big; }), "S = 8");
  expect_error(run([&](auto& a) { a.level_start_index = bad_start; }), "level_start_index[1]");
  expect_error(run([&](auto& a) { a.level_start_index = short_start; }), "level_start_index");
  expect_error(run([&](auto& a) { a.value.shape[1] = 7; }), "value");
  expect_error(run([&](auto& a) { a.value.stride[3] = 2; }), "value: last dimension");
  expect_error(run([&](auto& a) { a.value.data = nullptr; }), "value");
  expect_error(run([&](auto& a) { a.sampling_locations.shape[5] = 3; }), "sampling_locations");
  expect_error(run([&](auto& a) { a.sampling_locations.shape[2] = 1; }), "sampling_locations");
  expect_error(run([&](auto& a) { a.attention_weights.shape[4] = 3; }), "attention_weights");
  expect_error(run([&](auto& a) { a.out.shape[2] = 4; }), "out");
  expect_error(run([&](auto& a) {  // Q = 2^62: null data whose element count wraps
                 a.sampling_locations.shape[1] = a.attention_weights.shape[1] = a.out.shape[1] = int64_t(1) << 62;
                 a.sampling_locations.data = nullptr;
               }),
               "sampling_locations [B, Q, H, Lv, P, 2]: element count overflows");
  Grads g(pr);
  expect_error([&] {
    auto gv = g.view(pr);
    gv.d_value.shape[2] = 1;
    ms_deform_attn_backward(pr.args(out), gv);
  }, "d_value");
  expect_error([&] {
    auto gv = g.view(pr);
    gv.d_sampling_locations.shape[1] = 5;
    ms_deform_attn_reference_backward(pr.args(out), gv);
  }, "d_sampling_locations");
  expect_error([&] {
    auto gv = g.view(pr);
    gv.d_out.shape[2] = 3;
    ms_deform_attn_backward(pr.args(out), gv);
  }, "d_out");
}

}  // namespace
}  // namespace attnkit
