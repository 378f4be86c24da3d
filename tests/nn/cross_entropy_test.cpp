// Cross-entropy, plain and fused with the LM head: fast vs the double reference (bars from the
// float roundings: logits by sgemm, vectorised exp-sums, the softmax-minus-onehot products),
// vocabularies spanning several kVocabChunk chunks with spiked logits on the chunk edges, exact
// uniform-logit cases, ignored tokens, finite differences of the references, thread-count
// determinism and target validation.
#include "attnkit/nn/cross_entropy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "nn/nn_testing.hpp"

namespace attnkit {
namespace {

using nn_testing::kU;
using nn_testing::Mat;
constexpr int64_t kChunk = CrossEntropyTiles::kVocabChunk;

std::vector<int32_t> random_targets(int64_t t, int64_t v, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(v - 1));
  std::vector<int32_t> targets(static_cast<size_t>(t));
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = i % 5 == 3 ? -100 : pick(rng);
  return targets;
}

// Double-precision view of one fused problem: logits z, their magnitudes M (Σ|h||w| + |b|),
// lse and softmax p per token, computed independently of the library.
struct Exact {
  int64_t t, v;
  std::vector<double> z, mag, lse, p;
  int64_t n_valid = 0;
  Exact(const Mat& h, const Mat& w, const std::vector<float>& b,
        const std::vector<int32_t>& targets)
      : t(h.rows),
        v(w.rows),
        z(size_t(t * v)),
        mag(size_t(t * v)),
        lse(size_t(t)),
        p(size_t(t * v)) {
    for (int64_t i = 0; i < t; ++i) {
      n_valid += targets[size_t(i)] >= 0;
      double m = -INFINITY;
      for (int64_t j = 0; j < v; ++j) {
        double acc = b.empty() ? 0.0 : b[size_t(j)], am = b.empty() ? 0.0 : std::abs(b[size_t(j)]);
        for (int64_t c = 0; c < h.cols; ++c) {
          acc += double(h.at(i, c)) * w.at(j, c);
          am += std::abs(double(h.at(i, c)) * w.at(j, c));
        }
        z[size_t(i * v + j)] = acc;
        mag[size_t(i * v + j)] = am;
        m = std::max(m, acc);
      }
      double s = 0;
      for (int64_t j = 0; j < v; ++j) s += std::exp(z[size_t(i * v + j)] - m);
      lse[size_t(i)] = m + std::log(s);
      for (int64_t j = 0; j < v; ++j)
        p[size_t(i * v + j)] = std::exp(z[size_t(i * v + j)] - lse[size_t(i)]);
    }
  }
  double max_mag(int64_t i) const {
    return *std::max_element(&mag[size_t(i * v)], &mag[size_t(i * v + v)]);
  }
  double max_gap(int64_t i) const {  // max |z - lse|: the exp arguments' size
    double g = 0;
    for (int64_t j = 0; j < v; ++j)
      g = std::max(g, std::abs(z[size_t(i * v + j)] - lse[size_t(i)]));
    return g;
  }
  // Relative error budget of a float softmax entry / lse term for token i: logits by a C-term
  // sgemm ((C + 2)·u·M), a float exp-sum over V terms in lanes ((V + 16)·u), exp's argument
  // rounding (u·|z - lse|) and a few more roundings.
  double budget(int64_t i, int64_t c) const {
    return kU * (double(c + 2) * max_mag(i) + double(v + 16) + max_gap(i) + 8);
  }
};

void compare_fused(const Mat& h, const Mat& w, const std::vector<float>& b,
                   const std::vector<int32_t>& targets, const std::string& what) {
  SCOPED_TRACE(what);
  const int64_t t = h.rows, c = h.cols, v = w.rows;
  const Exact ex(h, w, b, targets);
  std::vector<float> losses(static_cast<size_t>(t)), lse(static_cast<size_t>(t));
  std::vector<float> losses_ref(static_cast<size_t>(t)), lse_ref(static_cast<size_t>(t));
  const float loss = linear_cross_entropy_forward(losses, lse, h.cview(), w.cview(), b, targets);
  const float loss_ref =
      linear_cross_entropy_forward_reference(losses_ref, lse_ref, h.cview(), w.cview(), b, targets);
  double worst_budget = 0;
  for (int64_t i = 0; i < t; ++i) {
    if (targets[size_t(i)] < 0) {
      EXPECT_EQ(losses[size_t(i)], 0.0f);
      EXPECT_EQ(lse[size_t(i)], 0.0f);
      continue;
    }
    const double bar = ex.budget(i, c) + 2 * kU * std::abs(ex.lse[size_t(i)]);
    worst_budget = std::max(worst_budget, bar + 2 * kU * std::abs(losses_ref[size_t(i)]));
    EXPECT_NEAR(lse[size_t(i)], lse_ref[size_t(i)], bar) << "lse " << i;
    EXPECT_NEAR(losses[size_t(i)], losses_ref[size_t(i)],
                bar + 2 * kU * std::abs(losses_ref[size_t(i)]))
        << "loss " << i;
  }
  EXPECT_NEAR(loss, loss_ref, worst_budget + kU * std::abs(loss_ref));

  // Backward from the same (reference) lse; parameter gradients start non-zero (+=).
  const float d_loss = 0.7f;
  const double scale = ex.n_valid ? d_loss / double(ex.n_valid) : 0.0;
  Mat d_h = Mat(t, c).randn(1), d_h_ref(t, c), d_w = Mat(v, c).randn(2), d_w_ref = d_w;
  const Mat d_w0 = d_w;
  std::vector<float> d_b = b.empty() ? std::vector<float>{} : randn(v, 3);
  std::vector<float> d_b_ref = d_b;
  const std::vector<float> d_b0 = d_b;
  linear_cross_entropy_backward(d_h.view(), d_w.view(), d_b, h.cview(), w.cview(), b, targets,
                                lse_ref, d_loss);
  linear_cross_entropy_backward_reference(d_h_ref.view(), d_w_ref.view(), d_b_ref, h.cview(),
                                          w.cview(), b, targets, lse_ref, d_loss);
  // |dz_v| <= scale·(p_v + onehot); each carries the budget above as relative error, and d_h /
  // d_W sum V / T of them in float (another (V + 2)·u / (T + 3)·u).
  auto onehot = [&](int64_t i, int64_t j) { return targets[size_t(i)] == j ? 1.0 : 0.0; };
  nn_testing::expect_within(
      d_h, d_h_ref,
      [&](int64_t i, int64_t k) {
        if (targets[size_t(i)] < 0) return 0.0;
        double m = 0;
        for (int64_t j = 0; j < v; ++j)
          m += (ex.p[size_t(i * v + j)] + onehot(i, j)) * std::abs(w.at(j, k));
        return (ex.budget(i, c) + double(v + 2) * kU) * scale * m;
      },
      "d_h");
  double max_budget = 0;
  for (int64_t i = 0; i < t; ++i)
    if (targets[size_t(i)] >= 0) max_budget = std::max(max_budget, ex.budget(i, c));
  auto param_bar = [&](int64_t j, const std::function<double(int64_t)>& factor, double prior) {
    double m = 0;
    for (int64_t i = 0; i < t; ++i)
      if (targets[size_t(i)] >= 0) m += (ex.p[size_t(i * v + j)] + onehot(i, j)) * factor(i);
    return (max_budget + double(t + 3) * kU) * (scale * m + std::abs(prior));
  };
  nn_testing::expect_within(
      d_w, d_w_ref,
      [&](int64_t j, int64_t k) {
        return param_bar(
            j, [&](int64_t i) { return std::abs(h.at(i, k)); }, d_w0.at(j, k));
      },
      "d_w");
  nn_testing::expect_within(
      d_b, d_b_ref,
      [&](size_t j) {
        return param_bar(
            int64_t(j), [](int64_t) { return 1.0; }, d_b0[j]);
      },
      "d_b");
}

TEST(NnCrossEntropy, FusedMatchesReferenceAcrossVocabularyChunks) {
  for (int64_t t : {1, 7, 65})
    for (int64_t c : {1, 17, 64})
      for (int64_t v : {int64_t(17), 2 * kChunk + 4}) {
        const Mat h = Mat(t, c).randn(uint32_t(t + c), 0.5f),
                  w = Mat(v, c).randn(uint32_t(v), 0.5f);
        const auto b = (t + c) % 2 ? randn(v, 5) : std::vector<float>{};
        compare_fused(h, w, b, random_targets(t, v, uint32_t(t * c)),
                      testing::PrintToString(std::vector<int64_t>{t, c, v}));
      }
}

TEST(NnCrossEntropy, FusedHandlesSpikedLogitsOnChunkEdges) {
  // Logits are 10 on the first and last row of every chunk and on the last row, 0 elsewhere:
  // those six rows carry ~99.9 % of the probability, so a row lost or counted twice at a chunk
  // boundary moves every result by ~20 %.
  const int64_t t = 9, c = 8, v = 2 * kChunk + 4;
  Mat h(t, c), w(v, c);
  for (int64_t i = 0; i < t; ++i) h.at(i, i % c) = 1.0f;
  for (int64_t j : {int64_t(0), kChunk - 1, kChunk, 2 * kChunk - 1, 2 * kChunk, v - 1})
    for (int64_t k = 0; k < c; ++k) w.at(j, k) = 10.0f;
  const std::vector<int32_t> targets = {0,    int32_t(kChunk - 1),     int32_t(kChunk),
                                        -100, int32_t(2 * kChunk),     int32_t(v - 1),
                                        5,    int32_t(2 * kChunk - 1), 3};
  compare_fused(h, w, {}, targets, "spiked");
}

TEST(NnCrossEntropy, UniformLogitsGiveLogVExactly) {
  // h = 0: every logit is 0, the chunk sums 2048 + 2048 + 4 are exact in float, lse = log V.
  const int64_t v = 2 * kChunk + 4;
  const Mat h(3, 5), w = Mat(v, 5).randn(1);
  std::vector<float> losses(3), lse(3);
  const float loss = linear_cross_entropy_forward(losses, lse, h.cview(), w.cview(), {},
                                                  std::vector<int32_t>{0, 7, v - 1});
  for (float l : lse) EXPECT_NEAR(l, std::log(double(v)), kU * std::log(double(v)));
  EXPECT_NEAR(loss, std::log(double(v)), 2 * kU * std::log(double(v)));
}

TEST(NnCrossEntropy, PlainMatchesReference) {
  for (int64_t t : {1, 7, 65})
    for (int64_t v : {int64_t(1), int64_t(17), int64_t(64), int64_t(3000)}) {
      SCOPED_TRACE(::testing::Message() << "T=" << t << " V=" << v);
      const Mat logits = Mat(t, v).randn(uint32_t(t + v), 3.0f);
      const auto targets = random_targets(t, v, uint32_t(t * v));
      std::vector<float> losses(static_cast<size_t>(t)), lse(static_cast<size_t>(t));
      std::vector<float> losses_ref(static_cast<size_t>(t)), lse_ref(static_cast<size_t>(t));
      const float loss = cross_entropy_forward(losses, lse, logits.cview(), targets);
      const float loss_ref =
          cross_entropy_forward_reference(losses_ref, lse_ref, logits.cview(), targets);
      double worst = 0;
      for (int64_t i = 0; i < t; ++i) {
        double gap = 0;
        for (int64_t j = 0; j < v; ++j)
          gap = std::max(gap, std::abs(double(logits.at(i, j)) - lse_ref[size_t(i)]));
        // Float exp-sum over V terms in lanes, exp's argument rounding, the log and the
        // subtraction.
        const double bar = kU * (double(v + 16) + gap + 2 * std::abs(lse_ref[size_t(i)]) +
                                 2 * std::abs(losses_ref[size_t(i)]));
        worst = std::max(worst, bar);
        EXPECT_NEAR(lse[size_t(i)], lse_ref[size_t(i)], bar);
        EXPECT_NEAR(losses[size_t(i)], losses_ref[size_t(i)], bar);
      }
      EXPECT_NEAR(loss, loss_ref, worst + kU * std::abs(loss_ref));
      const Mat logits_copy = logits;
      Mat d(t, v), d_ref(t, v);
      cross_entropy_backward(d.view(), logits.cview(), targets, lse_ref, 1.3f);
      cross_entropy_backward_reference(d_ref.view(), logits.cview(), targets, lse_ref, 1.3f);
      int64_t n_valid = 0;
      for (auto x : targets) n_valid += x >= 0;
      const double scale = n_valid ? 1.3 / double(n_valid) : 0.0;
      // p = exp(z - lse) within (4 + |z - lse|)·u, times scale, minus the one-hot term.
      nn_testing::expect_within(
          d, d_ref,
          [&](int64_t i, int64_t j) {
            const double gap = std::abs(double(logits.at(i, j)) - lse_ref[size_t(i)]);
            const double p = std::exp(-gap * (logits.at(i, j) < lse_ref[size_t(i)] ? 1 : -1));
            return kU * scale * (p * (4 + gap) + 2 * (targets[size_t(i)] == j));
          },
          "d_logits");
      Mat inplace = logits_copy;  // d_logits may alias logits
      cross_entropy_backward(inplace.view(), inplace.cview(), targets, lse_ref, 1.3f);
      EXPECT_TRUE(nn_testing::bitwise_equal(inplace, d));
    }
}

TEST(NnCrossEntropy, ReferenceGradientsMatchFiniteDifferences) {
  const std::vector<int32_t> targets = {2, -100, 0, 6};
  {  // plain
    Mat logits = Mat(4, 7).randn(1);
    std::vector<float> losses(4), lse(4);
    auto loss = [&] {
      return double(cross_entropy_forward_reference(losses, lse, logits.cview(), targets));
    };
    loss();
    Mat d(4, 7);
    cross_entropy_backward_reference(d.view(), logits.cview(), targets, lse, 1.0f);
    nn_testing::GradCheck g;
    g.sweep(loss, logits, d);
    g.expect_ok("cross_entropy");
  }
  Mat h = Mat(4, 3).randn(2), w = Mat(7, 3).randn(3);
  std::vector<float> b = randn(7, 4), losses(4), lse(4);
  auto loss = [&] {
    return double(
        linear_cross_entropy_forward_reference(losses, lse, h.cview(), w.cview(), b, targets));
  };
  loss();
  Mat d_h(4, 3), d_w(7, 3);
  std::vector<float> d_b(7, 0.0f);
  linear_cross_entropy_backward_reference(d_h.view(), d_w.view(), d_b, h.cview(), w.cview(), b,
                                          targets, lse, 1.0f);
  nn_testing::GradCheck g;
  g.sweep(loss, h, d_h);
  g.sweep(loss, w, d_w);
  g.sweep(loss, b, d_b);
  g.expect_ok("linear_cross_entropy");
  for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(d_h.at(1, k), 0.0f);  // ignored token
}

TEST(NnCrossEntropy, AllIgnoredGivesZeroLossAndGradients) {
  const Mat h = Mat(3, 4).randn(1), w = Mat(9, 4).randn(2);
  const std::vector<int32_t> targets = {-100, -1, -100};
  std::vector<float> losses(3, 5.0f), lse(3, 5.0f);
  EXPECT_EQ(linear_cross_entropy_forward(losses, lse, h.cview(), w.cview(), {}, targets), 0.0f);
  EXPECT_EQ(losses, std::vector<float>(3, 0.0f));
  Mat d_h = Mat(3, 4).randn(3), d_w(9, 4);
  linear_cross_entropy_backward(d_h.view(), d_w.view(), {}, h.cview(), w.cview(), {}, targets, lse,
                                1.0f);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(d_h.at(i, k), 0.0f);
  for (int64_t j = 0; j < 9; ++j)
    for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(d_w.at(j, k), 0.0f);
  Mat logits = Mat(3, 9).randn(4);
  EXPECT_EQ(cross_entropy_forward(losses, lse, logits.cview(), targets), 0.0f);
}

TEST(NnCrossEntropy, FusedIsBitwiseIdenticalForAnyThreadCount) {
  const int64_t t = 150, c = 40, v = kChunk + 52;  // several token tiles, two chunks
  const Mat h = Mat(t, c).randn(1), w = Mat(v, c).randn(2, 0.3f);
  const auto b = randn(v, 3);
  const auto targets = random_targets(t, v, 4);
  auto run = [&](int threads) {
    ThreadCountScope scope(threads);
    std::vector<float> losses(static_cast<size_t>(t)), lse(static_cast<size_t>(t));
    const float loss = linear_cross_entropy_forward(losses, lse, h.cview(), w.cview(), b, targets);
    Mat d_h(t, c), d_w(v, c);
    std::vector<float> d_b(static_cast<size_t>(v), 0.0f);
    linear_cross_entropy_backward(d_h.view(), d_w.view(), d_b, h.cview(), w.cview(), b, targets,
                                  lse, 1.0f);
    return std::make_tuple(loss, lse, d_h, d_w, d_b);
  };
  const auto a = run(1), bb = run(3);
  EXPECT_EQ(std::get<0>(a), std::get<0>(bb));
  EXPECT_EQ(std::get<1>(a), std::get<1>(bb));
  EXPECT_TRUE(nn_testing::bitwise_equal(std::get<2>(a), std::get<2>(bb)));
  EXPECT_TRUE(nn_testing::bitwise_equal(std::get<3>(a), std::get<3>(bb)));
  EXPECT_EQ(std::get<4>(a), std::get<4>(bb));
}

TEST(NnCrossEntropy, LogitsForwardMatchesReference) {
  const Mat h = Mat(7, 17).randn(1), w = Mat(33, 17).randn(2);
  const auto b = randn(33, 3);
  Mat z(7, 33), z_ref(7, 33), mag(7, 33);
  logits_forward(z.view(), h.cview(), w.cview(), b);
  logits_forward_reference(z_ref.view(), h.cview(), w.cview(), b);
  const Mat ah = h.abs(), aw = w.abs();
  logits_forward_reference(mag.view(), ah.cview(), aw.cview(), nn_testing::abs_vec(b));
  nn_testing::expect_within(
      z, z_ref, [&](int64_t i, int64_t j) { return 19 * kU * mag.at(i, j); }, "logits");
}

TEST(NnCrossEntropy, TargetOutOfRangeNamesTheIndex) {
  const Mat h = Mat(3, 4).randn(1), w = Mat(9, 4).randn(2);
  std::vector<float> losses(3), lse(3);
  try {
    linear_cross_entropy_forward(losses, lse, h.cview(), w.cview(), {},
                                 std::vector<int32_t>{0, 9, 1});
    ADD_FAILURE() << "target 9 accepted for V = 9";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("targets[1] = 9 is out of range"), std::string::npos)
        << e.what();
  }
  const Mat logits(3, 9);
  EXPECT_THROW(cross_entropy_forward(losses, lse, logits.cview(), std::vector<int32_t>{0, 1}),
               Error);
  std::vector<float> b(8);
  EXPECT_THROW(linear_cross_entropy_forward(losses, lse, h.cview(), w.cview(), b,
                                            std::vector<int32_t>{0, 1, 2}),
               Error);
}

}  // namespace
}  // namespace attnkit
