// The sink profiler against direct computations on tiny random models: each head's probabilities
// sum to 1 minus the sink share, equal exp(s_j - lse) with the flash kernel's lse, reproduce the
// attention output as Σ_j p_j·v_j, and average over windows as a plain loop says; gate statistics
// equal the mean and histogram of the forward's gate values.
#include "attnkit/tools/sink_profile.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/core/error.hpp"
#include "test_compare.hpp"

namespace attnkit {
namespace {

GptConfig tiny(GateMode gate, SinkLogits sink, int64_t window) {
  GptConfig c;
  c.vocab_size = 40, c.hidden_size = 24, c.intermediate_size = 40, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 6;
  c.max_position_embeddings = 64;
  c.gate = gate, c.sink_logits = sink, c.window = window;
  return c;
}

GptModel random_model(const GptConfig& cfg) {
  GptModel model(cfg);
  model.init_random(5);
  for (auto& p : model.parameter_info()) {  // larger weights: peaked attention; sinks that matter
    auto x = model.parameter(p.name);
    const bool sinks = p.name.find("sinks") != std::string::npos;
    for (size_t i = 0; i < x.size(); ++i)
      if (sinks) x[i] = 0.5f * float(i % 3) - 0.3f;
      else if (p.shape.size() == 2) x[i] *= 15.0f;
  }
  return model;
}

std::vector<int32_t> text(int64_t n) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t((i * 7 + i * i % 11 + 3) % 40));
  return t;
}

const GptConfig kConfigs[] = {
    tiny(GateMode::kNone, SinkLogits::kNone, -1),
    tiny(GateMode::kHeadwise, SinkLogits::kLearned, -1),
    tiny(GateMode::kElementwise, SinkLogits::kOffByOne, 9),
};

TEST(SinkProfile, RowsSumToOneMinusSinkAndReproduceTheKernel) {
  for (const auto& cfg : kConfigs) {
    GptModel model = random_model(cfg);
    const int64_t N = 20, H = cfg.num_attention_heads, Hkv = cfg.num_key_value_heads, D = cfg.head_dim;
    const auto tokens = text(N + 1);
    Tensor<float, 2> logits({N + 1, cfg.vocab_size});
    model.logits({tokens, {}}, logits.view());
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
      const AttentionBlockCache cache = model.attention_cache(l);
      std::vector<double> p(static_cast<size_t>(H * (N + 1))), sink(static_cast<size_t>(H));
      attention_row_probabilities(p, sink, cache.qkv, N, model.block_options(), model.block_params(l).sinks);
      for (int64_t h = 0; h < H; ++h) {
        double sum = 0, worst_p = 0, out_scale = 0, worst_out = 0;
        for (int64_t j = 0; j <= N; ++j) sum += p[size_t(h * (N + 1) + j)];
        if (cfg.sink_logits == SinkLogits::kNone) {
          EXPECT_EQ(sink[size_t(h)], 0.0);
        }
        else EXPECT_GT(sink[size_t(h)], 1e-6);
        EXPECT_NEAR(sum + sink[size_t(h)], 1.0, 1e-12);
        // p_j = exp(scale·q·k_j - lse): lse from the flash kernel (float32, includes the sink).
        const double lse = cache.lse(h, N);
        const int64_t kc = (H + h / (H / Hkv)) * D, vc = (H + Hkv + h / (H / Hkv)) * D;
        for (int64_t j = 0; j <= N; ++j) {
          const bool visible = cfg.window < 0 || j >= N - cfg.window;
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += double(cache.qkv(N, h * D + d)) * cache.qkv(j, kc + d);
          const double expect = visible ? std::exp(s / std::sqrt(double(D)) - lse) : 0.0;
          worst_p = worse_error(worst_p, std::abs(expect - p[size_t(h * (N + 1) + j)]));
        }
        // Σ_j p_j·v_j is the attention output before the gate (float32 flash result).
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j <= N; ++j) o += p[size_t(h * (N + 1) + j)] * cache.qkv(j, vc + d);
          for (int64_t j = 0; j <= N; ++j) out_scale = std::max(out_scale, std::abs(double(cache.qkv(j, vc + d))));
          worst_out = worse_error(worst_out, std::abs(o - cache.attn(N, h * D + d)));
        }
        // float32 lse carries a relative error of a few ulps; scores are O(10) here.
        EXPECT_LT(worst_p, 1e-5) << "layer " << l << " head " << h;
        EXPECT_LT(worst_out, 1e-5 * out_scale) << "layer " << l << " head " << h;
      }
    }
  }
}

TEST(SinkProfile, AveragesWindowsAndGateStatistics) {
  for (const auto& cfg : kConfigs) {
    GptModel model = random_model(cfg);
    const int64_t N = 12, H = cfg.num_attention_heads, W = 3, n = N + 1;
    const auto tokens = text(50);
    const SinkProfile prof = sink_profile(model, tokens, {.query_pos = N, .windows = W, .gate_bins = 4});
    // Direct: windows start at 0, (50 - n)/2, 50 - n; one forward each.
    std::vector<double> mass(size_t(cfg.num_hidden_layers * H * n), 0.0), gmean(size_t(cfg.num_hidden_layers * H), 0.0);
    std::vector<double> p(static_cast<size_t>(H * n)), sink(static_cast<size_t>(H));
    double gcount = 0;
    for (int64_t start : {int64_t(0), (50 - n) / 2, 50 - n}) {
      Tensor<float, 2> logits({n, cfg.vocab_size});
      model.logits({std::span<const int32_t>(tokens).subspan(size_t(start), size_t(n)), {}}, logits.view());
      for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
        const AttentionBlockCache cache = model.attention_cache(l);
        attention_row_probabilities(p, sink, cache.qkv, N, model.block_options(), model.block_params(l).sinks);
        for (int64_t i = 0; i < H * n; ++i) mass[size_t(l * H * n + i)] += p[size_t(i)] / W;
        if (cfg.gate == GateMode::kNone) continue;
        const int64_t per = cache.gate.shape[1] / H;
        for (int64_t t = 0; t < n; ++t)
          for (int64_t g = 0; g < cache.gate.shape[1]; ++g) gmean[size_t(l * H + g / per)] += cache.gate(t, g);
        if (l == 0) gcount += double(n * per);
      }
    }
    for (size_t i = 0; i < mass.size(); ++i) EXPECT_NEAR(prof.mass[i], mass[i], 1e-12);
    EXPECT_EQ(prof.has_gate, cfg.gate != GateMode::kNone);
    for (int64_t lh = 0; lh < cfg.num_hidden_layers * H; ++lh) {
      double hist = 0;
      for (int64_t b = 0; b < 4; ++b) hist += prof.gate_hist[size_t(lh * 4 + b)];
      if (cfg.gate == GateMode::kNone) {
        EXPECT_EQ(hist, 0.0);
        continue;
      }
      EXPECT_NEAR(hist, 1.0, 1e-12);
      EXPECT_NEAR(prof.gate_mean[size_t(lh)], gmean[size_t(lh)] / gcount, 1e-12);
    }
    const SinkBuckets all = prof.overall_buckets(4);
    EXPECT_NEAR(all.first + all.next3 + all.middle + all.recent + all.sink, 1.0, 1e-12);
  }
}

TEST(SinkProfile, BucketsSplitTheRow) {
  const std::vector<double> p{0.5, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.1};  // N = 7
  const SinkBuckets b = bucket_mass(p, 0.0, 2);  // recent: keys 6, 7
  EXPECT_DOUBLE_EQ(b.first, 0.5);
  EXPECT_DOUBLE_EQ(b.next3, 0.25);
  EXPECT_DOUBLE_EQ(b.middle, 0.1);
  EXPECT_DOUBLE_EQ(b.recent, 0.15);
  const SinkBuckets c = bucket_mass(p, 0.0, 64);  // recent never takes tokens 0-3
  EXPECT_DOUBLE_EQ(c.middle, 0.0);
  EXPECT_DOUBLE_EQ(c.recent, 0.25);
}

TEST(SinkProfile, RejectsBadOptions) {
  GptModel model = random_model(kConfigs[0]);
  const auto tokens = text(30);
  EXPECT_THROW(sink_profile(model, tokens, {.query_pos = 64}), Error);   // past the context
  EXPECT_THROW(sink_profile(model, tokens, {.query_pos = 30}), Error);   // past the text
  EXPECT_THROW(sink_profile(model, tokens, {.query_pos = 5, .windows = 0}), Error);
  EXPECT_THROW(sink_profile(model, tokens, {.query_pos = -1}), Error);
}

// hidden_norm row 0 is the embedding's norm (residual stream entering layer 0), key_norm the norm
// of the forward's own keys, both averaged over the windows; residual() needs a forward first.
TEST(SinkProfile, NormsAreThoseOfTheEmbeddingAndTheForwardsKeys) {
  GptModel fresh(kConfigs[0]);
  EXPECT_THROW(fresh.residual(0), Error);
  const GptConfig& cfg = kConfigs[1];
  GptModel model = random_model(cfg);
  const int64_t N = 10, L = cfg.num_hidden_layers, C = cfg.hidden_size, Hkv = cfg.num_key_value_heads;
  const int64_t H = cfg.num_attention_heads, D = cfg.head_dim, n = N + 1;
  const auto tokens = text(40);
  const SinkProfile p = sink_profile(model, tokens, {.query_pos = N, .windows = 2});
  ASSERT_EQ(p.hidden_norm.size(), size_t((L + 1) * n));
  ASSERT_EQ(p.key_norm.size(), size_t(L * Hkv * n));
  EXPECT_THROW(model.residual(L + 1), Error);
  const ConstView2 emb = model.matrix("model.embed_tokens.weight");
  std::vector<double> key(static_cast<size_t>(L * Hkv * n), 0.0);
  for (int64_t start : {int64_t(0), int64_t(40 - n)}) {  // the two windows: first and last
    const std::vector<int32_t> w(tokens.begin() + start, tokens.begin() + start + n);
    Tensor<float, 2> logits({n, cfg.vocab_size});
    model.logits({w, {}}, logits.view());
    for (int64_t l = 0; l < L; ++l)
      for (int64_t g = 0; g < Hkv; ++g)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += std::pow(double(model.attention_cache(l).qkv(j, (H + g) * D + d)), 2);
          key[size_t((l * Hkv + g) * n + j)] += 0.5 * std::sqrt(s);
        }
  }
  for (int64_t j = 0; j < n; ++j) {
    double e0 = 0, e1 = 0;  // the token at position j of window 0 and of window 1
    for (int64_t c = 0; c < C; ++c) {
      e0 += std::pow(double(emb(tokens[size_t(j)], c)), 2);
      e1 += std::pow(double(emb(tokens[size_t(40 - n + j)], c)), 2);
    }
    EXPECT_NEAR(p.hidden_norm[size_t(j)], 0.5 * (std::sqrt(e0) + std::sqrt(e1)), 1e-12 * (1 + std::sqrt(e0 + e1)));
  }
  for (size_t i = 0; i < key.size(); ++i) EXPECT_NEAR(p.key_norm[i], key[i], 1e-9 * (1 + key[i]));
}

}  // namespace
}  // namespace attnkit
