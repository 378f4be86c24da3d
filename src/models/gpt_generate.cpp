// One-token decode steps of a GptModel against a KV cache, and sampling.
#include "attnkit/models/gpt_generate.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attnkit/attention/decode.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/nn/activation.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/norm.hpp"

namespace attnkit {
namespace {

KVCacheConfig cache_config(const GptConfig& c, const GenerateOptions& o) {
  KVCacheConfig k{.layers = c.num_hidden_layers, .kv_heads = c.num_key_value_heads,
                  .head_dim = c.head_dim, .dtype = o.cache_dtype};
  if (o.n_sink >= 0 && o.window > 0) {
    k.policy = KVPolicy::sink;
    k.n_sink = o.n_sink;
    k.window = o.window;
  } else {
    k.policy = KVPolicy::dense;
    k.capacity = o.capacity > 0 ? o.capacity : c.max_position_embeddings;
  }
  return k;
}

View2 row(std::vector<float>& v, int64_t width) { return View2::contiguous(v.data(), {1, width}); }

std::string layer_name(int64_t l, const char* rest) {
  return "model.layers." + std::to_string(l) + "." + rest;
}

}  // namespace

GptGenerator::GptGenerator(const GptModel& model, const GenerateOptions& options)
    : model_(model), options_(options), cache_(cache_config(model.config(), options)),
      rng_(options.seed) {
  check(options.temperature >= 0, "--temperature: must be >= 0");
  check(options.top_p > 0 && options.top_p <= 1, "--top-p: must be in (0, 1]");
  check(options.top_k >= 0, "--top-k: must be >= 0");
  const auto& c = model.config();
  const int64_t C = c.hidden_size, H = c.num_attention_heads, D = c.head_dim;
  x_.resize(size_t(C)), h_.resize(size_t(C)), proj_.resize(size_t(C));
  qkv_.resize(size_t((H + 2 * c.num_key_value_heads) * D));
  attn_.resize(size_t(H * D)), gate_.resize(size_t(H * D));
  ff_gate_.resize(size_t(c.intermediate_size)), ff_up_.resize(size_t(c.intermediate_size)), ff_.resize(size_t(c.intermediate_size));
  logits_.resize(size_t(c.vocab_size)), probs_.resize(size_t(c.vocab_size));
  cache_.add_sequence();  // sequence 0: the one being generated
}

std::span<const float> GptGenerator::feed(int32_t token) {
  const auto& c = model_.config();
  const int64_t C = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads,
                D = c.head_dim, F = c.intermediate_size;
  check(token >= 0 && token < c.vocab_size, "generate: token ", token, " out of range [0, ", c.vocab_size, ")");
  check(cache_.config().policy == KVPolicy::sink || position_ < cache_.slots_per_sequence(),
        "generate: the dense cache holds ", cache_.slots_per_sequence(),
        " tokens; use --sink/--window (StreamingLLM) to go further");
  auto p = [&](const std::string& name) { return model_.info(name); };
  const float* params = model_.parameters().data();
  auto mat = [&](const std::string& name) {
    const auto& i = p(name);
    return ConstView2::contiguous(params + i.offset, {i.shape[0], i.shape[1]});
  };
  auto vec = [&](const std::string& name) {
    const auto& i = p(name);
    return std::span<const float>(params + i.offset, size_t(i.numel));
  };
  std::copy_n(params + p("model.embed_tokens.weight").offset + int64_t(token) * C, C, x_.begin());
  float rstd = 0;
  const float eps = float(c.rms_norm_eps);
  const std::vector<int64_t> seqs{0};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    rms_norm_forward(row(h_, C), {&rstd, 1}, row(x_, C), vec(layer_name(l, "input_layernorm.weight")), eps);
    const auto& q = p(layer_name(l, "self_attn.q_proj.weight"));
    const int64_t rows = (H + 2 * Hkv) * D;
    std::span<const float> qkv_bias;
    if (c.attention_bias) qkv_bias = {params + p(layer_name(l, "self_attn.q_proj.bias")).offset, size_t(rows)};
    linear_forward(row(qkv_, rows), row(h_, C), ConstView2::contiguous(params + q.offset, {rows, C}), qkv_bias);
    const auto kv = [&](int64_t first) { return ConstView3::contiguous(qkv_.data() + first, {1, Hkv, D}); };
    cache_.append(0, l, kv(H * D), kv((H + Hkv) * D));  // K before RoPE: rotated on read
    std::vector<float> sinks;
    if (c.sink == SinkMode::kLearned) sinks.assign(vec(layer_name(l, "self_attn.sinks")).begin(), vec(layer_name(l, "self_attn.sinks")).end());
    if (c.sink == SinkMode::kOffByOne) sinks.assign(size_t(H), 0.0f);
    DecodeOptions dopt{.attention = {.window_left = int(c.window), .window_right = 0},
                       .rope_theta = float(c.rope_theta)};
    decode_attention(dopt, {.q = ConstView3::contiguous(qkv_.data(), {1, H, D}), .seqs = seqs,
                            .cache = &cache_, .layer = l, .sink_logits = sinks,
                            .out = View3::contiguous(attn_.data(), {1, H, D})});
    if (c.gate != GateMode::kNone) {  // sigmoid gate from the block input or the pre-RoPE query
      const int64_t hg = c.gate == GateMode::kHeadwise ? H : H * D;
      const auto w = mat(layer_name(l, "self_attn.output_gate.weight"));
      const auto b = vec(layer_name(l, "self_attn.output_gate.bias"));
      for (int64_t gi = 0; gi < hg; ++gi) {
        const int64_t head = c.gate == GateMode::kHeadwise ? gi : gi / D;
        const float* in = c.gate_source == GateSource::kInput ? h_.data() : qkv_.data() + head * D;
        const int64_t n = c.gate_source == GateSource::kInput ? C : D;
        double g = b[size_t(gi)];
        for (int64_t e = 0; e < n; ++e) g += double(w(gi, e)) * in[e];
        const float s = float(1.0 / (1.0 + std::exp(-g)));
        if (c.gate == GateMode::kHeadwise)
          for (int64_t e = 0; e < D; ++e) attn_[size_t(gi * D + e)] *= s;
        else
          attn_[size_t(gi)] *= s;
      }
    }
    linear_forward(row(proj_, C), row(attn_, H * D), mat(layer_name(l, "self_attn.o_proj.weight")), {});
    for (int64_t e = 0; e < C; ++e) x_[size_t(e)] += proj_[size_t(e)];
    rms_norm_forward(row(h_, C), {&rstd, 1}, row(x_, C), vec(layer_name(l, "post_attention_layernorm.weight")), eps);
    linear_forward(row(ff_gate_, F), row(h_, C), mat(layer_name(l, "mlp.gate_proj.weight")), {});
    linear_forward(row(ff_up_, F), row(h_, C), mat(layer_name(l, "mlp.up_proj.weight")), {});
    swiglu_forward(row(ff_, F), row(ff_gate_, F), row(ff_up_, F));
    linear_forward(row(proj_, C), row(ff_, F), mat(layer_name(l, "mlp.down_proj.weight")), {});
    for (int64_t e = 0; e < C; ++e) x_[size_t(e)] += proj_[size_t(e)];
  }
  rms_norm_forward(row(h_, C), {&rstd, 1}, row(x_, C), vec("model.norm.weight"), eps);
  const std::string head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  linear_forward(row(logits_, c.vocab_size), row(h_, C), mat(head), {});
  ++position_;
  return logits_;
}

int32_t GptGenerator::sample(std::span<const float> logits) {
  const int64_t v = int64_t(logits.size());
  if (options_.temperature == 0)
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  order_.resize(size_t(v));
  std::iota(order_.begin(), order_.end(), 0);
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  const int64_t k = options_.top_k > 0 ? std::min(options_.top_k, v) : v;
  const float m = logits[size_t(order_[0])];
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += probs_[size_t(i)] = std::exp((logits[size_t(order_[size_t(i)])] - m) / options_.temperature);
  int64_t keep = k;  // nucleus: the smallest prefix whose mass reaches top_p
  double mass = 0;
  for (int64_t i = 0; i < k; ++i) {
    mass += probs_[size_t(i)] / total;
    if (mass >= options_.top_p) {
      keep = i + 1;
      break;
    }
  }
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += probs_[size_t(i)];
  const double u = std::uniform_real_distribution<double>(0.0, kept)(rng_);
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += probs_[size_t(i)];
    if (u < acc) return order_[size_t(i)];
  }
  return order_[size_t(keep - 1)];
}

}  // namespace attnkit
