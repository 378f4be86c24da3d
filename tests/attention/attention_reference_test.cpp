// Reference attention against first principles: finite differences in double for every gradient,
// the sink and fully-masked-row rules, and validation errors.
#include "attnkit/attention/attention_reference.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "attention/attention_problem.hpp"
#include "attnkit/core/error.hpp"
#include "test_errors.hpp"
#include "test_compare.hpp"

namespace attnkit {
namespace {

using testing::Problem;
using testing::ProblemShape;

struct GradientCase {
  const char* name;
  ProblemShape shape;
  AttentionOptions opts;
};

void check_gradients(const GradientCase& c) {
  Problem p(c.shape, 7);
  attention_reference_backward(c.opts, p.args(), p.grads());
  ASSERT_TRUE(p.guards_intact());
  double worst = 0, scale = 0;
  auto sweep = [&](testing::Guarded& x, const testing::Guarded& g, int64_t row, int64_t used) {
    for (int64_t i = 0; i < x.size(); ++i) {
      if (i % row >= used) continue;  // padding between strided rows is not an input
      const double num = testing::reference_numeric_grad(p, c.opts, &x.data()[i]);
      const double ana = g.data()[(i / row) * used + i % row];
      worst = worse_error(worst, std::abs(num - ana));
      scale = std::max(scale, std::abs(num));
    }
  };
  const auto& s = c.shape;
  sweep(p.q, p.d_q, p.row(s.h), s.h * s.d);
  sweep(p.k, p.d_k, p.row(s.hkv), s.hkv * s.d);
  sweep(p.v, p.d_v, p.row(s.hkv), s.hkv * s.d);
  for (size_t h = 0; h < p.sinks.size(); ++h) {
    const double num = testing::reference_numeric_grad(p, c.opts, &p.sinks[h]);
    worst = worse_error(worst, std::abs(num - p.d_sink[h]));
    scale = std::max(scale, std::abs(num));
  }
  // Central differences with h = 1e-2 on float inputs: truncation O(h²) and float rounding of the
  // outputs (~1e-7 relative) divided by 2h bound the error near 1e-4 of the gradient's scale.
  EXPECT_LT(worst, 2e-3 * std::max(1.0, scale)) << c.name << " scale " << scale;
}

TEST(AttentionReference, GradientsMatchFiniteDifferences) {
  const GradientCase cases[] = {
      {"mha", {{5}, {5}, 2, 2, 4}, {}},
      {"gqa causal", {{6}, {6}, 4, 2, 3}, AttentionOptions::causal()},
      {"mqa lq<lk causal", {{3}, {7}, 3, 1, 4}, AttentionOptions::causal()},
      {"lq>lk causal (masked rows)", {{6}, {3}, 2, 1, 4}, AttentionOptions::causal()},
      {"window", {{7}, {7}, 2, 1, 3}, {.window_left = 2, .window_right = 1}},
      {"softcap", {{5}, {6}, 2, 2, 4}, {.scale = 0.9f, .softcap = 1.5f}},
      {"sinks", {{5}, {5}, 4, 2, 3, true}, AttentionOptions::causal()},
      {"varlen empty", {{3, 0, 4}, {2, 3, 4}, 2, 1, 3, true}, AttentionOptions::causal()},
      {"strided", {{4}, {5}, 2, 1, 4, false, 3}, {}},
      {"dropout", {{5}, {6}, 2, 1, 4}, {.dropout_p = 0.3f, .seed = 42}},
  };
  for (const auto& c : cases) check_gradients(c);
}

TEST(AttentionReference, RowsWithSinkSumBelowOne) {
  Problem p({{6}, {6}, 2, 1, 4, true}, 3);
  for (int64_t i = 0; i < p.v.size(); ++i) p.v.data()[i] = 1.0f;  // out = Σ_j P_j
  auto a = p.args();
  attention_reference(AttentionOptions::causal(), a);
  for (int64_t t = 0; t < p.tq; ++t)
    for (int64_t h = 0; h < 2; ++h) {
      const double expected = 1.0 - std::exp(double(p.sinks[size_t(h)]) - a.lse(h, t));
      EXPECT_NEAR(a.out(t, h, 0), expected, 1e-6);
      EXPECT_LT(a.out(t, h, 0), 1.0f);
    }
}

TEST(AttentionReference, FullyMaskedRowsGiveZerosAndMinusInfLse) {
  // Lq = 5 > Lk = 2 with a bottom-right causal mask: queries 0..2 see no key.
  Problem p({{5}, {2}, 2, 1, 4}, 5);
  auto a = p.args();
  attention_reference(AttentionOptions::causal(), a);
  attention_reference_backward(AttentionOptions::causal(), a, p.grads());
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t h = 0; h < 2; ++h) {
      const bool masked = t < 3;
      EXPECT_EQ(std::isinf(a.lse(h, t)) && a.lse(h, t) < 0, masked);
      for (int64_t e = 0; e < 4; ++e) {
        EXPECT_FALSE(std::isnan(a.out(t, h, e)));
        if (masked) {
          EXPECT_EQ(a.out(t, h, e), 0.0f);
          EXPECT_EQ(p.grads().d_q(t, h, e), 0.0f);
        }
      }
    }
}

TEST(AttentionReference, RejectsBadArguments) {
  Problem p({{4}, {4}, 3, 2, 4}, 1);  // H = 3 not a multiple of Hkv = 2
  EXPECT_THROW(attention_reference({}, p.args()), Error);
  Problem ok({{2, 2}, {2, 2}, 2, 1, 4}, 1);
  ok.cu_q = {0, 3, 2, 4};
  ok.cu_k = {0, 2, 2, 4};
  expect_error([&] { attention_reference({}, ok.args()); }, "cu_seqlens_q");
  Problem nan({{3}, {3}, 2, 1, 4}, 1);
  nan.k.data()[5] = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { attention_reference({}, nan.args()); }, "k: non-finite");
  Problem good({{3}, {3}, 2, 1, 4}, 1);
  EXPECT_THROW(attention_reference({.dropout_p = 1.0f}, good.args()), Error);
  EXPECT_THROW(attention_reference({.window_left = -2}, good.args()), Error);
  // sequence_span of a sequence past the last read past cu_seqlens.
  EXPECT_EQ(sequence_span(ok.args(), 2).q_end, 4);
  expect_error([&] { sequence_span(ok.args(), 3); }, "sequence_span: sequence 3 out of range [0, 3)");
  expect_error([&] { sequence_span(good.args(), 1); }, "out of range [0, 1)");
}

}  // namespace
}  // namespace attnkit
