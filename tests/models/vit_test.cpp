// ViT image classifier: logits of the fast path against a plain-loop reference of the same
// network (run in double as the spec and in float to measure float32's own rounding error, which
// sets the bar); every parameter's gradient against central finite differences on a tiny model
// (both poolings, dropout on with a fixed seed); save → load bitwise; config validation; bad input.
#include "attnkit/models/vit.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"
#include "test_compare.hpp"

namespace attnkit {
namespace {

VitConfig tiny(VitPooling pooling) {
  VitConfig c;
  c.hidden_size = 8, c.num_hidden_layers = 2, c.num_attention_heads = 2, c.intermediate_size = 12;
  c.image_height = 8, c.image_width = 12, c.patch_size = 4, c.num_channels = 2, c.num_labels = 3;
  c.layer_norm_eps = 1e-6;
  c.pooling = pooling;
  return c;
}

std::vector<float> random_images(const VitConfig& c, int64_t n, uint32_t seed) {
  return randn(n * c.num_channels * c.image_height * c.image_width, seed);
}

ConstView4 image_view(const VitConfig& c, const std::vector<float>& x, int64_t n) {
  return ConstView4::contiguous(x.data(), {n, c.num_channels, c.image_height, c.image_width});
}

// A model with HF-style weights plus noise, so LayerNorm weights and biases are non-trivial.
VitModel noisy_model(const VitConfig& c, uint32_t seed) {
  VitModel m(c);
  m.init_random(seed);
  add_randn(m.parameters(), seed + 100, 0.3f);
  return m;
}

// The network written out with plain loops in scalar type R (the spec: vit.hpp's formulas).
template <class R>
std::vector<R> reference_logits(VitModel& m, const std::vector<float>& x, int64_t n_img) {
  const VitConfig& c = m.config();
  const int64_t C = c.hidden_size, F = c.intermediate_size, P = c.patch_size, s = c.seq_len();
  const int64_t H = c.num_attention_heads, D = c.head_dim(), K = c.num_labels;
  const int64_t gw = c.grid_w(), np = c.num_patches(), hh = c.image_height, ww = c.image_width;
  auto w = [&](const std::string& name) { return m.parameter(name).data(); };
  auto lin = [](const std::vector<R>& in, int64_t in_dim, const float* wt, const float* b,
                int64_t out_dim) {
    const int64_t rows = int64_t(in.size()) / in_dim;
    std::vector<R> out(size_t(rows * out_dim));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out_dim; ++o) {
        R acc = b ? R(b[o]) : R(0);
        for (int64_t i = 0; i < in_dim; ++i) acc += in[size_t(r * in_dim + i)] * R(wt[o * in_dim + i]);
        out[size_t(r * out_dim + o)] = acc;
      }
    return out;
  };
  auto ln = [&](const std::vector<R>& in, const std::string& name) {
    std::vector<R> out(in.size());
    const float *g = w(name + ".weight"), *b = w(name + ".bias");
    for (size_t r = 0; r < in.size() / size_t(C); ++r) {
      R mean = 0, var = 0;
      for (int64_t k = 0; k < C; ++k) mean += in[r * size_t(C) + size_t(k)];
      mean /= R(C);
      for (int64_t k = 0; k < C; ++k) var += std::pow(in[r * size_t(C) + size_t(k)] - mean, 2);
      const R rstd = R(1) / std::sqrt(var / R(C) + R(c.layer_norm_eps));
      for (int64_t k = 0; k < C; ++k)
        out[r * size_t(C) + size_t(k)] = (in[r * size_t(C) + size_t(k)] - mean) * rstd * R(g[k]) + R(b[k]);
    }
    return out;
  };
  std::vector<R> xs(size_t(n_img * s * C));
  for (int64_t n = 0; n < n_img; ++n)
    for (int64_t j = 0; j < s; ++j)
      for (int64_t o = 0; o < C; ++o) {
        R acc = 0;
        if (j == 0) {
          acc = R(w("vit.embeddings.cls_token")[o]);
        } else {  // conv2d with kernel P, stride P at patch (gy, gx)
          const int64_t gy = (j - 1) / gw, gx = (j - 1) % gw;
          acc = R(w("vit.embeddings.patch_embeddings.projection.bias")[o]);
          for (int64_t ci = 0; ci < c.num_channels; ++ci)
            for (int64_t u = 0; u < P; ++u)
              for (int64_t v = 0; v < P; ++v)
                acc += R(x[size_t(((n * c.num_channels + ci) * hh + gy * P + u) * ww + gx * P + v)]) *
                       R(w("vit.embeddings.patch_embeddings.projection.weight")[((o * c.num_channels + ci) * P + u) * P + v]);
        }
        xs[size_t((n * s + j) * C + o)] = acc + R(w("vit.embeddings.position_embeddings")[j * C + o]);
      }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "vit.encoder.layer." + std::to_string(l) + ".";
    const std::vector<R> h1 = ln(xs, p + "layernorm_before");
    const std::string qkv = p + "attention.attention.";
    const auto q = lin(h1, C, w(qkv + "query.weight"), c.qkv_bias ? w(qkv + "query.bias") : nullptr, C);
    const auto k = lin(h1, C, w(qkv + "key.weight"), c.qkv_bias ? w(qkv + "key.bias") : nullptr, C);
    const auto v = lin(h1, C, w(qkv + "value.weight"), c.qkv_bias ? w(qkv + "value.bias") : nullptr, C);
    std::vector<R> att(xs.size(), R(0));
    for (int64_t n = 0; n < n_img; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < s; ++i) {
          std::vector<R> sc(static_cast<size_t>(s));
          R mx = -INFINITY, sum = 0;
          for (int64_t j = 0; j < s; ++j) {
            R dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += q[size_t((n * s + i) * C + h * D + d)] * k[size_t((n * s + j) * C + h * D + d)];
            sc[size_t(j)] = dot / std::sqrt(R(D));
            mx = std::max(mx, sc[size_t(j)]);
          }
          for (auto& e : sc) sum += e = std::exp(e - mx);
          for (int64_t j = 0; j < s; ++j)
            for (int64_t d = 0; d < D; ++d)
              att[size_t((n * s + i) * C + h * D + d)] += sc[size_t(j)] / sum * v[size_t((n * s + j) * C + h * D + d)];
        }
    const auto o = lin(att, C, w(p + "attention.output.dense.weight"), w(p + "attention.output.dense.bias"), C);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] += o[i];
    auto f = lin(ln(xs, p + "layernorm_after"), C, w(p + "intermediate.dense.weight"), w(p + "intermediate.dense.bias"), F);
    for (auto& e : f) e = e / 2 * (1 + std::erf(e / std::sqrt(R(2))));
    const auto o2 = lin(f, F, w(p + "output.dense.weight"), w(p + "output.dense.bias"), C);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] += o2[i];
  }
  const std::vector<R> y = ln(xs, "vit.layernorm");
  std::vector<R> pooled(size_t(n_img * C), R(0));
  for (int64_t n = 0; n < n_img; ++n)
    for (int64_t kk = 0; kk < C; ++kk) {
      if (c.pooling == VitPooling::kCls) {
        pooled[size_t(n * C + kk)] = y[size_t(n * s * C + kk)];
      } else {
        for (int64_t j = 1; j < s; ++j) pooled[size_t(n * C + kk)] += y[size_t((n * s + j) * C + kk)];
        pooled[size_t(n * C + kk)] /= R(np);
      }
    }
  return lin(pooled, C, w("classifier.weight"), w("classifier.bias"), K);
}

class VitPoolings : public ::testing::TestWithParam<VitPooling> {};

TEST_P(VitPoolings, LogitsMatchThePlainLoopReference) {
  const ThreadCountScope one_thread(1);
  VitConfig c = tiny(GetParam());
  c.hidden_size = 32, c.num_attention_heads = 4, c.intermediate_size = 48;  // longer sums
  c.image_height = 16, c.image_width = 16;                                  // S = 17
  VitModel m = noisy_model(c, 1);
  const int64_t n = 3;
  const std::vector<float> x = random_images(c, n, 2);
  const ConstView2 got = m.forward(image_view(c, x, n));
  ASSERT_EQ(got.shape[0], n);
  ASSERT_EQ(got.shape[1], c.num_labels);
  const std::vector<double> ref = reference_logits<double>(m, x, n);
  const std::vector<float> f32 = reference_logits<float>(m, x, n);
  double err = 0, err32 = 0, scale = 0;
  for (int64_t i = 0; i < n * c.num_labels; ++i) {
    err = worse_error(err, std::abs(double(got.data[i]) - ref[size_t(i)]));
    err32 = worse_error(err32, std::abs(double(f32[size_t(i)]) - ref[size_t(i)]));
    scale = std::max(scale, std::abs(ref[size_t(i)]));
  }
  // FlashAttention's bar: at most a small multiple of plain float32's own error (+ rounding).
  EXPECT_LE(err, 4 * err32 + 8 * nn_testing::kU * scale) << "float32 reference error " << err32;
  EXPECT_GT(scale, 0.1);  // the logits are not trivially zero
}

TEST_P(VitPoolings, EveryParameterGradientMatchesFiniteDifferences) {
  const ThreadCountScope one_thread(1);  // tiny shapes: thread hand-offs would dominate
  VitConfig c = tiny(GetParam());
  c.hidden_dropout_prob = 0.2, c.attention_probs_dropout_prob = 0.2;
  c.hidden_act = GetParam() == VitPooling::kMean ? GeluApproximation::kTanh : GeluApproximation::kNone;
  VitModel m = noisy_model(c, 3);
  const int64_t n = 3;
  const std::vector<float> x = random_images(c, n, 4);
  const std::vector<float> r = randn(n * c.num_labels, 5);
  m.set_training(true, 99);  // fixed seed: the dropout masks stay put between evaluations
  auto loss = [&] {
    const ConstView2 y = m.forward(image_view(c, x, n));
    double s = 0;
    for (int64_t i = 0; i < n * c.num_labels; ++i) s += double(y.data[i]) * r[size_t(i)];
    return s;
  };
  loss();
  m.zero_grad();
  m.backward(ConstView2::contiguous(r.data(), {n, c.num_labels}));
  const std::vector<float> grads(m.gradients().begin(), m.gradients().end());
  const auto& info = m.parameter_info();
  const auto checks = nn_testing::expect_sampled_gradients(loss, m.parameters(), info, grads, 6);
  for (size_t t = 0; t < info.size(); ++t)
    EXPECT_GT(checks[t].scale, 0.0) << info[t].name << ": no gradient reached it";
}

INSTANTIATE_TEST_SUITE_P(Vit, VitPoolings, ::testing::Values(VitPooling::kCls, VitPooling::kMean),
                         [](const auto& info) { return info.param == VitPooling::kCls ? "Cls" : "Mean"; });

TEST(Vit, BackwardAccumulatesAndIsIdenticalForAnyThreadCount) {
  VitConfig c = tiny(VitPooling::kCls);
  c.hidden_size = 32, c.num_attention_heads = 4, c.intermediate_size = 64;
  const int64_t n = 8;
  const std::vector<float> x = random_images(c, n, 6), r = randn(n * c.num_labels, 7);
  auto run = [&](int threads) {
    const ThreadCountScope scope(threads);
    VitModel m = noisy_model(c, 8);
    const ConstView2 y = m.forward(image_view(c, x, n));
    std::vector<float> out(y.data, y.data + n * c.num_labels);
    m.backward(ConstView2::contiguous(r.data(), {n, c.num_labels}));
    const std::vector<float> once(m.gradients().begin(), m.gradients().end());
    m.backward(ConstView2::contiguous(r.data(), {n, c.num_labels}));  // += : twice the gradient
    for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(m.gradients()[i], 2 * once[i]);
    out.insert(out.end(), once.begin(), once.end());
    return out;
  };
  EXPECT_EQ(run(1), run(2));
}

TEST(Vit, SaveLoadRoundTripIsBitwise) {
  const ThreadCountScope one_thread(1);
  VitConfig c = tiny(VitPooling::kMean);
  c.labels = {"a", "b", "c"};
  c.qkv_bias = false;
  VitModel m = noisy_model(c, 9);
  const std::string dir = ::testing::TempDir() + "/vit_round_trip";
  std::filesystem::remove_all(dir);
  m.save(dir);
  const std::unique_ptr<ImageClassifier> back = load_image_classifier(dir);
  ASSERT_EQ(back->model_type(), "vit");
  EXPECT_EQ(back->config_json(), m.config_json());
  EXPECT_EQ(back->parameter_count(), m.parameter_count());
  ASSERT_TRUE(std::equal(m.parameters().begin(), m.parameters().end(), back->parameters().begin()));
  const std::vector<float> x = random_images(c, 2, 10);
  const ConstView2 a = m.forward(image_view(c, x, 2));
  const ConstView2 b = back->forward(image_view(c, x, 2));
  EXPECT_TRUE(std::equal(a.data, a.data + 2 * c.num_labels, b.data));
  const VitConfig d = parse_vit_config(m.config_json());
  EXPECT_EQ(d.labels, c.labels);
  EXPECT_EQ(d.pooling, VitPooling::kMean);
  EXPECT_FALSE(d.qkv_bias);
  EXPECT_EQ(d.image_width, 12);
  std::filesystem::remove_all(dir);
}

TEST(Vit, LayoutAndInitFollowHuggingFace) {
  VitConfig c = tiny(VitPooling::kCls);
  VitModel m(c);
  m.init_random(1);
  EXPECT_EQ(m.info("vit.embeddings.patch_embeddings.projection.weight").shape,
            (std::vector<int64_t>{8, 2, 4, 4}));
  EXPECT_EQ(m.info("vit.embeddings.position_embeddings").shape, (std::vector<int64_t>{1, 7, 8}));
  EXPECT_EQ(m.info("classifier.weight").shape, (std::vector<int64_t>{3, 8}));
  const auto& q = m.info("vit.encoder.layer.1.attention.attention.query.weight");
  EXPECT_EQ(m.info("vit.encoder.layer.1.attention.attention.value.weight").offset, q.offset + 128);
  for (float v : m.parameter("vit.layernorm.weight")) EXPECT_EQ(v, 1.0f);
  for (float v : m.parameter("classifier.bias")) EXPECT_EQ(v, 0.0f);
  for (float v : m.parameter("vit.embeddings.cls_token")) EXPECT_LE(std::abs(v), 0.04f);
  EXPECT_EQ(vit_parameter_count(c), m.parameter_count());
}

// initializer "fan_in" is PyTorch's nn.Linear / nn.Conv2d default: every weight and bias of a
// layer uniform in ±1/√fan_in (fan_in = Cin·P·P for the patch projection); the embeddings keep
// the truncated normal, LayerNorms one and zero. Uniform: std = bound/√3, and the extremes come
// close to the bound.
TEST(Vit, FanInInitIsPyTorchsModuleDefault) {
  VitConfig c = tiny(VitPooling::kMean);
  c.hidden_size = 32, c.intermediate_size = 64, c.num_attention_heads = 4;
  c.initializer = VitInitializer::kFanIn;
  VitModel m(c);
  m.init_random(3);
  auto check_uniform = [&](const std::string& name, double fan_in) {
    const std::span<const float> p = m.parameter(name);
    const double bound = 1.0 / std::sqrt(fan_in);
    double sq = 0, top = 0;
    for (float v : p) sq += double(v) * v, top = std::max(top, double(std::abs(v)));
    const double std = std::sqrt(sq / double(p.size()));
    EXPECT_LE(top, bound) << name;
    EXPECT_GE(top, 0.8 * bound) << name;
    if (p.size() >= 256) {
      EXPECT_NEAR(std, bound / std::sqrt(3.0), 0.12 * bound / std::sqrt(3.0)) << name;
    }
  };
  check_uniform("vit.embeddings.patch_embeddings.projection.weight", 2 * 4 * 4);
  check_uniform("vit.embeddings.patch_embeddings.projection.bias", 2 * 4 * 4);
  for (const char* t : {"query", "key", "value"}) {
    check_uniform(std::string("vit.encoder.layer.1.attention.attention.") + t + ".weight", 32);
    check_uniform(std::string("vit.encoder.layer.1.attention.attention.") + t + ".bias", 32);
  }
  check_uniform("vit.encoder.layer.0.intermediate.dense.weight", 32);
  check_uniform("vit.encoder.layer.0.output.dense.weight", 64);
  check_uniform("vit.encoder.layer.0.output.dense.bias", 64);
  check_uniform("classifier.weight", 32);
  for (float v : m.parameter("vit.encoder.layer.0.layernorm_after.weight")) EXPECT_EQ(v, 1.0f);
  for (float v : m.parameter("vit.layernorm.bias")) EXPECT_EQ(v, 0.0f);
  for (float v : m.parameter("vit.embeddings.position_embeddings")) EXPECT_LE(std::abs(v), 0.04f);
  // Round trip through config.json; the default stays Hugging Face's.
  EXPECT_EQ(parse_vit_config(m.config_json()).initializer, VitInitializer::kFanIn);
  EXPECT_EQ(parse_vit_config(vit_config_to_json(tiny(VitPooling::kCls))).initializer,
            VitInitializer::kTruncNormal);
  VitModel hf(tiny(VitPooling::kMean));
  hf.init_random(3);
  for (float v : hf.parameter("vit.embeddings.patch_embeddings.projection.bias")) EXPECT_EQ(v, 0.0f);
}

void expect_error_naming(const std::string& json, const std::string& key) {
  expect_error([&] { make_image_classifier(json); }, key);
}

TEST(Vit, BadConfigsThrowNamingTheKey) {
  const std::string base = R"("model_type": "vit", "hidden_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 16)";
  auto cfg = [&](const std::string& more) { return "{" + base + ", " + more + "}"; };
  EXPECT_NO_THROW(make_image_classifier(cfg(R"("image_size": 8, "patch_size": 4)")));
  expect_error_naming(cfg(R"("image_size": 10, "patch_size": 4)"), "patch_size");
  expect_error_naming(cfg(R"("image_size": [8, 6], "patch_size": 4)"), "image_size");
  expect_error_naming(cfg(R"("patch_size": 4)"), "image_size");
  expect_error_naming(cfg(R"("image_size": 8, "patch_size": 4, "pooling": "max")"), "pooling");
  expect_error_naming(cfg(R"("image_size": 8, "patch_size": 4, "num_labels": 0)"), "num_labels");
  expect_error_naming(cfg(R"("image_size": 8, "patch_size": 4, "initializer": "xavier")"), "initializer");
  expect_error_naming(cfg(R"("image_size": 8, "patch_size": 4, "hidden_act": "relu")"), "hidden_act");
  expect_error_naming(cfg(R"("image_size": 8, "patch_size": 4, "hidden_dropout_prob": 1.5)"),
                      "hidden_dropout_prob");
  expect_error_naming(R"({"model_type": "vit", "hidden_size": 6, "num_hidden_layers": 1,
      "num_attention_heads": 4, "intermediate_size": 3, "image_size": 8, "patch_size": 4})",
                      "num_attention_heads");
  expect_error_naming(R"({"model_type": "vit", "hidden_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "image_size": 8, "patch_size": 4})", "intermediate_size");
  expect_error_naming(R"({"model_type": "vitt"})", "model_type");
}

TEST(Vit, WrongInputShapeThrows) {
  const ThreadCountScope one_thread(1);
  const VitConfig c = tiny(VitPooling::kCls);
  VitModel m(c);
  const std::vector<float> x(2 * 2 * 8 * 12 * 2, 0.5f);
  EXPECT_THROW(m.backward(ConstView2::contiguous(x.data(), {2, 3})), Error);  // before forward
  EXPECT_THROW(m.forward(ConstView4::contiguous(x.data(), {2, 1, 8, 12})), Error);
  EXPECT_THROW(m.forward(ConstView4::contiguous(x.data(), {2, 2, 12, 8})), Error);
  EXPECT_THROW(m.forward(ConstView4::contiguous(x.data(), {0, 2, 8, 12})), Error);
  m.forward(ConstView4::contiguous(x.data(), {2, 2, 8, 12}));
  EXPECT_THROW(m.backward(ConstView2::contiguous(x.data(), {3, 3})), Error);
  EXPECT_THROW(m.backward(ConstView2::contiguous(x.data(), {2, 4})), Error);
}

}  // namespace
}  // namespace attnkit
