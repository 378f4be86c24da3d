// One-token decode steps of a GptModel against a KV cache, and sampling.
#include "attnkit/models/gpt_generate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
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
  if (o.sink_tokens == 0 && o.window > 0) {  // plain sliding window: the first tokens are evicted
    k.policy = KVPolicy::window;
    k.window = o.window;
  } else if (o.sink_tokens > 0 && o.window > 0) {
    k.policy = KVPolicy::sink;
    k.sink_tokens = o.sink_tokens;
    k.window = o.window;
  } else {
    k.policy = KVPolicy::dense;
    k.capacity = o.capacity > 0 ? o.capacity : c.max_position_embeddings;
  }
  return k;
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
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    layers_.push_back({model.vec(GptModel::layer_name(l, "input_layernorm.weight")),
                       model.vec(GptModel::layer_name(l, "post_attention_layernorm.weight")),
                       model.block_params(l),
                       model.matrix(GptModel::layer_name(l, "mlp.gate_proj.weight")),
                       model.matrix(GptModel::layer_name(l, "mlp.up_proj.weight")),
                       model.matrix(GptModel::layer_name(l, "mlp.down_proj.weight"))});
  embed_ = model.matrix("model.embed_tokens.weight");
  head_ = c.tie_word_embeddings ? embed_ : model.matrix("lm_head.weight");
  final_norm_ = model.vec("model.norm.weight");
  if (c.sink_logits == SinkLogits::kOffByOne) zero_sinks_.assign(size_t(H), 0.0f);
}

int64_t GptGenerator::batch_room() const {
  const KVPolicy p = cache_.config().policy;
  if (p != KVPolicy::window && p != KVPolicy::sink) return std::numeric_limits<int64_t>::max();
  return cache_.slots_per_sequence() - cache_.cached(0, 0);
}

std::span<const float> GptGenerator::feed_prompt(std::span<const int32_t> tokens) {
  std::span<const float> logits;
  for (size_t i = 0; i < tokens.size();) {
    // A window/sink cache that is full evicts on every append: the tokens of a batched step
    // would then lose keys the earlier of them still see, so such steps take one token.
    const size_t n = size_t(std::clamp<int64_t>(batch_room(), 1, kPrefillChunk));
    const auto chunk = tokens.subspan(i, std::min(n, tokens.size() - i));
    logits = feed_tokens(chunk);
    i += chunk.size();
  }
  return logits;
}

std::span<const float> GptGenerator::feed_tokens(std::span<const int32_t> tokens) {
  const auto& c = model_.config();
  const int64_t C = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads,
                D = c.head_dim, F = c.intermediate_size, n = int64_t(tokens.size());
  check(n >= 1, "generate: no tokens to feed");
  for (int32_t token : tokens)
    check(token >= 0 && token < c.vocab_size, "generate: token ", token, " out of range [0, ", c.vocab_size, ")");
  check(cache_.config().policy != KVPolicy::dense || position_ + n <= cache_.slots_per_sequence(),
        "generate: the dense cache holds ", cache_.slots_per_sequence(),
        " tokens; use --sink/--window (StreamingLLM) to go further");
  check(n == 1 || n <= batch_room(), "generate: ", n,
        " tokens in one step would evict keys they attend to (feed them one at a time)");
  const int64_t rows = (H + 2 * Hkv) * D;
  for (auto* b : {&x_, &h_, &proj_}) b->resize(size_t(n * C));
  qkv_.resize(size_t(n * rows)), attn_.resize(size_t(n * H * D));
  for (auto* b : {&ff_gate_, &ff_up_, &ff_}) b->resize(size_t(n * F));
  rstd_.resize(size_t(n));
  auto mat = [n](std::vector<float>& v, int64_t width) { return View2::contiguous(v.data(), {n, width}); };
  for (int64_t t = 0; t < n; ++t) std::copy_n(embed_.ptr(tokens[size_t(t)]), C, x_.begin() + t * C);
  const float eps = float(c.rms_norm_eps);
  const std::vector<int64_t> seqs{0};
  const DecodeOptions dopt{.attention = {.window_left = int(c.window), .window_right = 0},
                           .rope_theta = float(c.rope_theta)};
  // Q, K and V of token t are row t of qkv_ ([n, (H + 2·Hkv)·D]).
  auto heads = [&](int64_t first, int64_t count) {
    return ConstView3{qkv_.data() + first, {n, count, D}, {rows, D, 1}};
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = layers_[size_t(l)];
    rms_norm_forward(mat(h_, C), rstd_, mat(x_, C), w.input_norm, eps);
    linear_forward(mat(qkv_, rows), mat(h_, C), w.attn.qkv_proj_weight, w.attn.qkv_proj_bias);
    cache_.append(0, l, heads(H * D, Hkv), heads((H + Hkv) * D, Hkv));  // K before RoPE: rotated on read
    const std::span<const float> sinks = c.sink_logits == SinkLogits::kLearned ? w.attn.sinks
                                                                      : std::span<const float>(zero_sinks_);
    decode_attention(dopt, {.q = heads(0, H), .seqs = seqs, .cache = &cache_, .layer = l,
                            .sink_logits = sinks, .out = View3::contiguous(attn_.data(), {n, H, D})});
    if (c.gate != GateMode::kNone) {  // sigmoid gate from the block input or the pre-RoPE query
      const int64_t hg = c.gate == GateMode::kHeadwise ? H : H * D;
      const auto& gw = w.attn.gate_proj_weight;
      const auto& gb = w.attn.gate_proj_bias;
      for (int64_t t = 0; t < n; ++t) {
        float* out = attn_.data() + t * H * D;
        for (int64_t gi = 0; gi < hg; ++gi) {
          const int64_t head = c.gate == GateMode::kHeadwise ? gi : gi / D;
          const float* in = c.gate_source == GateSource::kInput ? h_.data() + t * C : qkv_.data() + t * rows + head * D;
          const int64_t len = c.gate_source == GateSource::kInput ? C : D;
          double g = gb.empty() ? 0.0 : double(gb[size_t(gi)]);
          for (int64_t e = 0; e < len; ++e) g += double(gw(gi, e)) * in[e];
          const float s = float(1.0 / (1.0 + std::exp(-g)));
          if (c.gate == GateMode::kHeadwise)
            for (int64_t e = 0; e < D; ++e) out[gi * D + e] *= s;
          else
            out[gi] *= s;
        }
      }
    }
    linear_forward(mat(proj_, C), mat(attn_, H * D), w.attn.o_proj_weight, w.attn.o_proj_bias);
    if (options_.all_reduce) options_.all_reduce(proj_);  // tensor parallel: sum the shards' heads
    for (size_t e = 0; e < proj_.size(); ++e) x_[e] += proj_[e];
    rms_norm_forward(mat(h_, C), rstd_, mat(x_, C), w.post_norm, eps);
    linear_forward(mat(ff_gate_, F), mat(h_, C), w.mlp_gate, {});
    linear_forward(mat(ff_up_, F), mat(h_, C), w.mlp_up, {});
    swiglu_forward(mat(ff_, F), mat(ff_gate_, F), mat(ff_up_, F));
    linear_forward(mat(proj_, C), mat(ff_, F), w.mlp_down, {});
    if (options_.all_reduce) options_.all_reduce(proj_);  // tensor parallel: sum the MLP slices
    for (size_t e = 0; e < proj_.size(); ++e) x_[e] += proj_[e];
  }
  // Logits for the last token only.
  const auto last = [&](std::vector<float>& v) { return View2::contiguous(v.data() + (n - 1) * C, {1, C}); };
  rms_norm_forward(last(h_), {rstd_.data(), 1}, last(x_), final_norm_, eps);
  linear_forward(View2::contiguous(logits_.data(), {1, c.vocab_size}), last(h_), head_, {});
  position_ += n;
  return logits_;
}

void GptGenerator::fill_cache_random(int64_t tokens, uint64_t seed) {
  const auto& c = model_.config();
  check(tokens >= 0, "fill_cache_random: tokens must be >= 0");
  check(cache_.config().policy == KVPolicy::sink || position_ + tokens <= cache_.slots_per_sequence(),
        "fill_cache_random: the dense cache holds ", cache_.slots_per_sequence(), " tokens");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const int64_t n = c.num_key_value_heads * c.head_dim;
  std::vector<float> k(static_cast<size_t>(n)), v(static_cast<size_t>(n));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      for (int64_t i = 0; i < n; ++i) k[size_t(i)] = normal(rng), v[size_t(i)] = normal(rng);
      cache_.append(0, l, ConstView3::contiguous(k.data(), {1, c.num_key_value_heads, c.head_dim}),
                    ConstView3::contiguous(v.data(), {1, c.num_key_value_heads, c.head_dim}));
    }
    ++position_;
  }
}

int32_t GptGenerator::sample(std::span<const float> logits) {
  const int64_t v = int64_t(logits.size());
  check(v == int64_t(probs_.size()), "sample: logits: expected [V] = ", probs_.size(), " entries, got ", v);
  bool any_finite = false;
  for (int64_t i = 0; i < v; ++i) {
    const float x = logits[size_t(i)];
    check(!std::isnan(x) && x != INFINITY, "sample: logits[", i, "] = ", x, ": must be finite or -inf");
    any_finite = any_finite || std::isfinite(x);
  }
  check(any_finite, "sample: logits: every entry is -inf");
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
