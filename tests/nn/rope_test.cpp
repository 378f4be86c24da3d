// Rotary embedding: Hugging Face's rotate_half pairing on a hand-checked case, fast vs the
// double reference on strided q/k slices of a fused QKV buffer (positions up to 1.2e7), the
// backward as the transpose (finite differences) and inverse, and argument errors.
#include "attnkit/nn/rope.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "attnkit/core/error.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using nn_testing::kU;

// A fused [T, (H + 2·Hkv)·D + pad] buffer; q is the view of its first H heads.
struct Qkv {
  int64_t t, h, d, ld;
  std::vector<float> buf;
  Qkv(int64_t t_, int64_t h_, int64_t d_, uint32_t seed)
      : t(t_), h(h_), d(d_), ld((3 * h_) * d_ + 5) {
    buf = randn(t * ld, seed);
  }
  View3 q() { return {buf.data(), {t, h, d}, {ld, d, 1}}; }
  View3 k() { return {buf.data() + h * d, {t, h, d}, {ld, d, 1}}; }
};

std::vector<int64_t> random_positions(int64_t t, int64_t max, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, max);
  std::vector<int64_t> p(static_cast<size_t>(t));
  for (auto& x : p) x = pick(rng);
  return p;
}

TEST(NnRope, RotatesHalvesLikeHuggingFaceLlama) {
  // D = 4: pairs (0, 2) and (1, 3); inv_freq = {1, 1/100} for theta = 1e4. Position 1.
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  View3 v{x.data(), {1, 1, 4}, {4, 4, 1}};
  const std::vector<int64_t> pos = {1};
  rope_forward(v, pos, {.theta = 10000.0});
  const double c0 = std::cos(1.0), s0 = std::sin(1.0), c1 = std::cos(0.01), s1 = std::sin(0.01);
  EXPECT_NEAR(x[0], 1 * c0 - 3 * s0, 1e-6);
  EXPECT_NEAR(x[2], 3 * c0 + 1 * s0, 1e-6);
  EXPECT_NEAR(x[1], 2 * c1 - 4 * s1, 1e-6);
  EXPECT_NEAR(x[3], 4 * c1 + 2 * s1, 1e-6);
  const auto f = rope_inv_freq(8, {.theta = 500000.0});
  ASSERT_EQ(f.size(), 4u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_NEAR(f[3], std::pow(500000.0, -6.0 / 8.0), 1e-18);
}

TEST(NnRope, FastMatchesReferenceOnFusedQkvSlices) {
  for (int64_t t : {1, 7, 65})
    for (int64_t d : {2, 18, 64})
      for (int64_t max_pos : {int64_t(4096), int64_t(12'000'000)}) {
        SCOPED_TRACE(::testing::Message() << "T=" << t << " D=" << d << " max position " << max_pos);
        const int64_t h = 3;
        Qkv fast(t, h, d, uint32_t(t * d)), ref = fast;
        const Qkv orig = fast;
        auto pos = random_positions(t, max_pos, uint32_t(t + d));
        pos[0] = max_pos;
        for (bool backward : {false, true}) {
          const RopeOptions o{.theta = backward ? 500000.0 : 10000.0};
          if (backward) {
            rope_backward(fast.k(), pos, o);
            rope_backward_reference(ref.k(), pos, o);
          } else {
            rope_forward(fast.q(), pos, o);
            rope_forward_reference(ref.q(), pos, o);
          }
        }
        // Per output: cos and sin rounded to float (angles exact in double, even at 1.2e7), two
        // products and a sum: |err| <= 3u·(|x_i| + |x_pair|). A float angle would be off by ~1 rad.
        for (int64_t i = 0; i < t * fast.ld; ++i) {
          const int64_t col = i % fast.ld;
          if (col >= 2 * h * d) {  // v and padding: never touched
            ASSERT_EQ(fast.buf[size_t(i)], orig.buf[size_t(i)]);
            continue;
          }
          const int64_t head_base = col / d * d, e = col % d;
          const int64_t pair = head_base + (e < d / 2 ? e + d / 2 : e - d / 2);
          const double mag =
              std::abs(orig.buf[size_t(i)]) + std::abs(orig.buf[size_t(i - col + pair)]);
          ASSERT_LE(std::abs(double(fast.buf[size_t(i)]) - ref.buf[size_t(i)]), 4 * kU * mag)
              << "element " << i;
        }
      }
}

// Positions below 65536 read cos/sin from the shared table, a call with a larger one evaluates
// every token's angles itself: the same tokens rotate bitwise alike on both paths.
TEST(NnRope, TablePathEqualsEvaluatedPathBitwise) {
  const int64_t h = 2, d = 64;
  const std::vector<int64_t> table_pos = {0, 1, 3000, 65535};
  std::vector<int64_t> eval_pos = table_pos;
  eval_pos.push_back(70000);
  for (bool backward : {false, true}) {
    Qkv a(4, h, d, 51), b(5, h, d, 51);
    std::copy_n(a.buf.begin(), a.buf.size(), b.buf.begin());
    const RopeOptions o{.theta = 10000.0};
    backward ? rope_backward(a.q(), table_pos, o) : rope_forward(a.q(), table_pos, o);
    backward ? rope_backward(b.q(), eval_pos, o) : rope_forward(b.q(), eval_pos, o);
    for (size_t i = 0; i < a.buf.size(); ++i) ASSERT_EQ(a.buf[i], b.buf[i]) << i;
    EXPECT_NE(a.buf, Qkv(4, h, d, 51).buf);  // rotated
  }
}

TEST(NnRope, BackwardIsTheTransposeAndTheInverse) {
  const int64_t t = 4, h = 2, d = 6;
  const std::vector<int64_t> pos = {0, 3, 17, 1000};
  const RopeOptions o{.theta = 10000.0};
  Qkv x(t, h, d, 41);
  const Qkv r(t, h, d, 42);
  auto loss = [&] {
    Qkv y = x;
    rope_forward_reference(y.q(), pos, o);
    double s = 0;
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < h * d; ++j)
        s += double(y.buf[size_t(i * x.ld + j)]) * r.buf[size_t(i * x.ld + j)];
    return s;
  };
  Qkv grad = r;
  rope_backward_reference(grad.q(), pos, o);
  nn_testing::GradCheck g;
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < h * d; ++j)
      g.add(nn_testing::numeric_grad(loss, &x.buf[size_t(i * x.ld + j)]),
            grad.buf[size_t(i * x.ld + j)]);
  g.expect_ok("rope");
  // Forward then backward restores x up to two float rotations (4u·(|a| + |b|) each).
  Qkv y = x;
  rope_forward(y.q(), pos, o);
  rope_backward(y.q(), pos, o);
  for (size_t i = 0; i < y.buf.size(); ++i) EXPECT_NEAR(y.buf[i], x.buf[i], 16 * kU * 4.0);
}

TEST(NnRope, RejectsBadArguments) {
  std::vector<float> x(2 * 5);
  View3 odd{x.data(), {2, 1, 5}, {5, 5, 1}};
  const std::vector<int64_t> pos = {0, 1};
  expect_error([&] { rope_forward(odd, pos, {}); },
               "rope_forward: x: head dimension D must be even, got D = 5");
  View3 even{x.data(), {2, 1, 4}, {5, 4, 1}};
  EXPECT_THROW(rope_forward(even, std::vector<int64_t>{0}, {}), Error);
  EXPECT_THROW(rope_forward(even, std::vector<int64_t>{0, -3}, {}), Error);
  EXPECT_THROW(rope_backward(even, pos, {.theta = 0.0}), Error);
}

}  // namespace
}  // namespace attnkit
