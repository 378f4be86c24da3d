// Deformable classifier (models/deformable_classifier.hpp): every parameter's gradient against
// central finite differences on a tiny network in training mode (batch statistics); the fast
// path against the whole-model float64-reference path, forward and backward, at the real 28×28
// geometry; bitwise determinism across thread counts; save/load round trip; config errors.
//
// Finite differences need the model's kinks out of reach of the steps. Bilinear sampling has
// kinks at integer pixel coordinates, and at initialisation every sampling point sits on one: a
// token's reference point is its pixel centre (pixel coordinate j on its own level) and the
// 4-head initial offsets are integers. With 16×16 images the levels are 8×8, 4×4 and 2×2, so the
// pixel centre of a token lands on level l' at (j + 0.5)·r - 0.5 for r = W_l'/W_l a power of
// two: fractional parts {0, 1/2, 1/4, 3/4, odd/8}. Shifting every offset bias by 1/16 pixel moves
// all of them to odd/16, at least 0.0625 from an integer, and the query's part of the offsets
// stays below ~0.01 pixel (offset weights of scale 0.002), so a 1e-2 step never crosses a kink.
// ReLU has a kink at 0, and a difference quotient over a tensor that feeds hundreds of units
// crosses some: its expected error grows like step · ρ(0) · Σ_units |∂L/∂z|·(∂z/∂θ)², ~1e-2 for
// conv weights at step 1e-2 with standardised inputs. So the batch-norm biases are raised by 3
// (ρ(0) of N(3, 1) is 55x smaller than of N(0, 1); ~0.1% of the units stay inactive), and an
// entry that misses the bar at step 1e-2 is retried at 2.5e-3 and 1e-3 (at most 5% may need it):
// a kink crossing at one step rarely recurs at a smaller one, a wrong gradient fails all three.
// The ReLU masks with half the units inactive are checked against PyTorch's autograd instead
// (tests/python/test_deformable_classifier.py).
#include "attnkit/models/deformable_classifier.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "models/image_round_trip.hpp"
#include "nn/nn_testing.hpp"

namespace attnkit {
namespace {

DeformableConfig tiny() {
  DeformableConfig c;
  c.image_size = 16, c.num_labels = 3, c.widths = {2, 3, 3, 4};
  c.d_model = 8, c.heads = 4, c.points = 2, c.layers = 2, c.ffn_dim = 8;
  return c;
}

// init_random, then values that make every path carry signal: non-uniform attention weights, a
// small query part in the sampling offsets, non-trivial biases and norm weights.
void perturb(DeformableClassifier& m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const std::span<float> w = m.parameters();
  for (const auto& p : m.parameter_info()) {
    float sigma = 0;
    if (p.name.ends_with("sampling_offsets.bias"))  // off the bilinear kinks (file comment)
      for (int64_t i = 0; i < p.numel; ++i) w[size_t(p.offset + i)] += 1.0f / 16;
    if (p.name.ends_with("bn.bias"))  // ReLU inputs away from its kink (file comment)
      for (int64_t i = 0; i < p.numel; ++i) w[size_t(p.offset + i)] += 3.0f;
    if (p.name.ends_with("sampling_offsets.weight")) sigma = 0.002f;
    else if (p.name.find("attention_weights") != std::string::npos) sigma = 0.5f;
    else if (p.name.ends_with(".bias") && !p.name.ends_with("sampling_offsets.bias")) sigma = 0.1f;
    else if (p.name.find("norm") != std::string::npos || p.name.ends_with("bn.weight")) sigma = 0.1f;
    for (int64_t i = 0; i < p.numel; ++i) w[size_t(p.offset + i)] += sigma * d(rng);
  }
}

TEST(DeformableClassifier, EveryParameterMatchesFiniteDifferences) {
  const ThreadCountScope one_thread(1);  // thousands of tiny forwards
  const DeformableConfig cfg = tiny();
  DeformableClassifier m(cfg);
  m.init_random(3);
  perturb(m, 4);
  m.set_reference(true);  // float64 kernels: less rounding noise in the difference quotients
  m.set_training(true);
  const int64_t n = 3, k = cfg.num_labels;
  const std::vector<float> x = randn(n * 16 * 16, 5);
  const ConstView4 xv = ConstView4::contiguous(x.data(), {n, 1, 16, 16});
  const std::vector<float> r = randn(n * k, 9);
  auto loss = [&] {
    const ConstView2 y = m.forward(xv);
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) s += double(y(i, j)) * r[size_t(i * k + j)];
    return s;
  };
  m.zero_grad();
  loss();
  m.backward(ConstView2::contiguous(r.data(), {n, k}));
  const std::vector<float> grads(m.gradients().begin(), m.gradients().end());
  std::mt19937 pick(5);
  int64_t second_step = 0, checked = 0;
  for (const auto& p : m.parameter_info()) {
    nn_testing::GradCheck check;
    const int64_t count = std::min<int64_t>(p.numel, 24);
    for (int64_t e = 0; e < count; ++e) {
      const int64_t i = p.offset + (count == p.numel ? e : int64_t(pick() % uint32_t(p.numel)));
      float* xi = &m.parameters()[size_t(i)];
      const double g = grads[size_t(i)];
      double fd = nn_testing::numeric_grad(loss, xi, 1e-2f);
      for (float h : {2.5e-3f, 1e-3f}) {  // a kink within reach: retry with smaller steps
        if (std::abs(fd - g) < nn_testing::kFiniteDifferenceBar * std::max(1.0, std::abs(fd))) break;
        ++second_step;
        const double fd_small = nn_testing::numeric_grad(loss, xi, h);
        if (std::abs(fd_small - g) < std::abs(fd - g)) fd = fd_small;
      }
      check.add(fd, g);
      ++checked;
    }
    check.expect_ok(p.name);
    EXPECT_GT(check.scale, 1e-6) << p.name << ": gradient identically zero";
  }
  EXPECT_LT(second_step, checked / 20) << "too many kinks within reach of the step";
}

// Fast vs reference at the default geometry (28×28, levels 14/7/4), two images. Both paths
// are float32 between layers; the reference sums in double inside each layer. A layer adds
// ~n·u relative error at worst for its n-term sums (n <= 288 here, typically √n·u) and the norms
// pass relative errors through unamplified to first order, so the ~30 layers stay below 2^-14
// of each tensor's scale (measured: 5e-6 at most, 12x below); a wrong or missing term is off by
// O(scale).
TEST(DeformableClassifier, FastMatchesReference) {
  const ThreadCountScope one_thread(1);  // small shapes; threads are BitwiseIdentical's business
  DeformableConfig cfg;  // default geometry, narrower (the float64 reference is slow)
  cfg.widths = {8, 16, 32, 32}, cfg.d_model = 32, cfg.ffn_dim = 64;
  DeformableClassifier fast(cfg), ref(cfg);
  fast.init_random(11);
  perturb(fast, 12);
  std::copy(fast.parameters().begin(), fast.parameters().end(), ref.parameters().begin());
  ref.set_reference(true);
  const int64_t n = 2;
  const std::vector<float> x = randn(n * 28 * 28, 13);
  const ConstView4 xv = ConstView4::contiguous(x.data(), {n, 1, 28, 28});
  const std::vector<float> r = randn(n * 10, 14);
  const ConstView2 rv = ConstView2::contiguous(r.data(), {n, 10});
  for (bool training : {false, true}) {
    SCOPED_TRACE(training ? "training" : "eval");
    for (DeformableClassifier* m : {&fast, &ref}) {
      m->set_training(training);
      m->zero_grad();
    }
    const ConstView2 yf = fast.forward(xv), yr = ref.forward(xv);
    const std::vector<float> lf(yf.data, yf.data + n * 10), lr(yr.data, yr.data + n * 10);
    fast.backward(rv);
    ref.backward(rv);
    auto expect_close = [](std::span<const float> got, std::span<const float> want,
                           const std::string& what) {
      double scale = 0;
      for (float v : want) scale = std::max(scale, double(std::abs(v)));
      EXPECT_GT(scale, 0.0) << what;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_LE(std::abs(double(got[i]) - double(want[i])), 0x1p-14 * scale)
            << what << "[" << i << "] got " << got[i] << " want " << want[i];
    };
    expect_close(lf, lr, "logits");
    for (const auto& p : fast.parameter_info())
      expect_close(fast.gradients().subspan(size_t(p.offset), size_t(p.numel)),
                   ref.gradients().subspan(size_t(p.offset), size_t(p.numel)), p.name);
  }
}

TEST(DeformableClassifier, BitwiseIdenticalAcrossThreadCounts) {
  DeformableConfig cfg;
  cfg.layers = 1;
  const std::vector<float> x = randn(3 * 28 * 28, 21);
  const std::vector<float> r = randn(3 * 10, 22);
  std::vector<std::vector<float>> logits, grads, buffers;
  for (int threads : {1, 2}) {
    const ThreadCountScope scope(threads);
    DeformableClassifier m(cfg);
    m.init_random(7);
    m.set_training(true);
    const ConstView2 y = m.forward(ConstView4::contiguous(x.data(), {3, 1, 28, 28}));
    logits.emplace_back(y.data, y.data + 30);
    m.backward(ConstView2::contiguous(r.data(), {3, 10}));
    grads.emplace_back(m.gradients().begin(), m.gradients().end());
    buffers.emplace_back(m.buffers().begin(), m.buffers().end());
  }
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_EQ(grads[0], grads[1]);
  EXPECT_EQ(buffers[0], buffers[1]);
}

TEST(DeformableClassifier, EvalUsesRunningStatisticsAndBatchIndependence) {
  const ThreadCountScope one_thread(1);
  DeformableClassifier m(tiny());
  m.init_random(1);
  const std::vector<float> x = randn(4 * 256, 2);
  const ConstView4 xv = ConstView4::contiguous(x.data(), {4, 1, 16, 16});
  const std::vector<float> before(m.buffers().begin(), m.buffers().end());
  const ConstView2 e1 = m.forward(xv);
  const std::vector<float> eval1(e1.data, e1.data + 12);
  EXPECT_EQ(std::vector<float>(m.buffers().begin(), m.buffers().end()), before);
  m.set_training(true);
  m.forward(xv);
  EXPECT_NE(std::vector<float>(m.buffers().begin(), m.buffers().end()), before);
  m.set_training(false);
  const ConstView2 all = m.forward(xv);
  const std::vector<float> eval2(all.data, all.data + 12);
  EXPECT_NE(eval2, eval1);  // new running statistics
  const ConstView2 one = m.forward(ConstView4::contiguous(x.data(), {1, 1, 16, 16}));
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(one(0, j), eval2[size_t(j)], 1e-5f);
}

TEST(DeformableClassifier, BackwardUsesTheForwardsBatchNormModeAndIsRepeatable) {
  const ThreadCountScope one_thread(1);
  DeformableClassifier m(tiny());
  m.init_random(2);
  const std::vector<float> x = randn(2 * 256, 3), r = randn(2 * 3, 4);
  const ConstView2 rv = ConstView2::contiguous(r.data(), {2, 3});
  m.set_training(true);
  m.forward(ConstView4::contiguous(x.data(), {2, 1, 16, 16}));
  m.backward(rv);
  const std::vector<float> once(m.gradients().begin(), m.gradients().end());
  m.set_training(false);  // after the forward: the backward still differentiates batch statistics
  m.zero_grad();
  m.backward(rv);
  EXPECT_EQ(std::vector<float>(m.gradients().begin(), m.gradients().end()), once);
  m.backward(rv);  // a second backward adds the same gradient again (+= contract; the kernels'
                   // partial sums then round differently, hence not bitwise)
  double scale = 0;
  for (float g : once) scale = std::max(scale, double(std::abs(g)));
  for (size_t i = 0; i < once.size(); ++i)
    ASSERT_NEAR(m.gradients()[i], 2 * once[i], 1e-5 * scale) << i;
}

TEST(DeformableClassifier, LayoutNamesAndFactory) {
  const DeformableConfig cfg;
  std::unique_ptr<ImageClassifier> m = make_image_classifier(deformable_config_to_json(cfg));
  ASSERT_EQ(m->model_type(), "deformable");
  EXPECT_EQ(m->num_classes(), 10);
  auto shape_of = [&](const std::string& name) {
    for (const auto& p : m->parameter_info())
      if (p.name == name) return p.shape;
    ADD_FAILURE() << "no " << name;
    return std::vector<int64_t>{};
  };
  EXPECT_EQ(shape_of("backbone.1.conv.weight"), (std::vector<int64_t>{32, 16, 3, 3}));
  EXPECT_EQ(shape_of("input_proj.2.weight"), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(shape_of("level_embed"), (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(shape_of("encoder.layers.1.self_attn.sampling_offsets.weight"),
            (std::vector<int64_t>{4 * 3 * 4 * 2, 64}));
  EXPECT_EQ(shape_of("encoder.layers.0.linear1.weight"), (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(shape_of("classifier.weight"), (std::vector<int64_t>{10, 64}));
  int64_t total = 0;
  for (const auto& p : m->parameter_info()) total += p.numel;
  EXPECT_EQ(total, m->parameter_count());
  EXPECT_EQ(m->buffer_info().size(), 8u);  // running mean and variance of 4 batch norms
}

TEST(DeformableClassifier, SaveLoadRoundTripIsBitwise) {
  const ThreadCountScope one_thread(1);
  DeformableConfig cfg = tiny();
  cfg.labels = {"a", "b", "c"};
  DeformableClassifier m(cfg);
  m.init_random(4);
  const std::vector<float> x = randn(2 * 256, 3);
  const ConstView4 xv = ConstView4::contiguous(x.data(), {2, 1, 16, 16});
  const std::unique_ptr<ImageClassifier> back = expect_bitwise_round_trip(m, xv, "deformable");
  ASSERT_TRUE(back);
  const auto& bc = static_cast<DeformableClassifier&>(*back).config();
  EXPECT_EQ(bc.labels, cfg.labels);
  EXPECT_EQ(bc.widths, cfg.widths);
  EXPECT_EQ(bc.points, cfg.points);
}

TEST(DeformableClassifier, BadConfigsAndInputsThrow) {
  auto bad = [](const std::string& json, const std::string& key) {
    try {
      parse_deformable_config(json);
      ADD_FAILURE() << "no error for " << json;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  bad("{", "invalid JSON");
  bad(R"({"model_type": "cnn"})", "model_type");
  bad(R"({"model_type": "deformable", "d_mdoel": 64})", "d_mdoel");
  bad(R"({"model_type": "deformable", "widths": [8]})", "widths");
  bad(R"({"model_type": "deformable", "widths": [8, -1]})", "widths");
  bad(R"({"model_type": "deformable", "widths": "8"})", "widths");
  bad(R"({"model_type": "deformable", "levels": 4})", "levels");
  bad(R"({"model_type": "deformable", "d_model": 62, "heads": 2})", "d_model");
  bad(R"({"model_type": "deformable", "d_model": 64, "heads": 3})", "d_model");
  bad(R"({"model_type": "deformable", "points": 0})", "points");
  bad(R"({"model_type": "deformable", "layers": "two"})", "layers");
  bad(R"({"model_type": "deformable", "ffn_dim": 0})", "ffn_dim");
  bad(R"({"model_type": "deformable", "num_labels": 1})", "num_labels");
  bad(R"({"model_type": "deformable", "layer_norm_eps": 0})", "layer_norm_eps");
  bad(R"({"model_type": "deformable", "id2label": {"12": "x"}})", "id2label");
  EXPECT_THROW(make_image_classifier(R"({"model_type": "deformable", "heads": 0})"), Error);
  const DeformableConfig back = parse_deformable_config(deformable_config_to_json(tiny()));
  EXPECT_EQ(back.widths, tiny().widths);
  EXPECT_EQ(back.ffn_dim, 8);

  DeformableClassifier m(tiny());
  std::vector<float> x(2 * 15 * 15);
  EXPECT_THROW(m.forward(ConstView4::contiguous(x.data(), {2, 1, 15, 15})), Error);
  EXPECT_THROW(m.backward(ConstView2{}), Error);  // no forward yet
  std::vector<float> y(2 * 256), d(2 * 4);
  m.forward(ConstView4::contiguous(y.data(), {2, 1, 16, 16}));
  EXPECT_THROW(m.backward(ConstView2::contiguous(d.data(), {2, 4})), Error);  // K is 3
}

}  // namespace
}  // namespace attnkit
