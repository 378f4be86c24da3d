#pragma once
// Autoregressive generation with a GptModel and a KV cache: each new token runs one decode step
// per layer (attention against the cache, K stored before RoPE and rotated by cache position),
// so the cost per token is set by the cache, not by the text generated so far. With the sink
// policy (StreamingLLM: sink_tokens first tokens + a window of recent ones) memory and time per token
// stay constant for any length.
#include <cstdint>
#include <functional>
#include <span>
#include <random>
#include <vector>

#include "attnkit/kv/kv_cache.hpp"
#include "attnkit/models/gpt.hpp"

namespace attnkit {

struct GenerateOptions {
  int64_t sink_tokens = -1;        // > 0 with window > 0: StreamingLLM sink + window cache;
                              // 0 with window > 0: plain sliding window (first tokens evicted)
  int64_t window = 0;         // recent tokens kept by the sink / window policy
  int64_t capacity = 0;       // dense cache: tokens (0 = the model's max_position_embeddings)
  DType cache_dtype = DType::f32;
  float temperature = 1.0f;   // 0 = greedy
  int64_t top_k = 0;          // 0 = off
  float top_p = 1.0f;         // nucleus mass; 1 = off
  uint64_t seed = 0;
  // Tensor parallelism: sums a shard's partial [C] output (attention output projection, MLP down
  // projection) over all shards in place. Empty: the model is whole (one process).
  std::function<void(std::span<float>)> all_reduce = nullptr;
};

class GptGenerator {
 public:
  GptGenerator(const GptModel& model, const GenerateOptions& options);
  // Feeds one token at the next position; returns the logits [V] for the following token.
  std::span<const float> feed(int32_t token) { return feed_tokens({&token, 1}); }
  // Feeds a prompt; returns the logits [V] after its last token (empty span for no tokens). Runs
  // batched steps (one GEMM per weight for many tokens, the new tokens attending causally to the
  // cache and to each other) as long as the cache can take them without evicting, then one
  // token at a time, so the result equals feeding the tokens one by one (up to float rounding).
  std::span<const float> feed_prompt(std::span<const int32_t> tokens);
  // Feeds n tokens as one batched step (all must fit in the cache without eviction); returns
  // the logits [V] after the last one.
  std::span<const float> feed_tokens(std::span<const int32_t> tokens);
  // Most tokens feed_prompt puts in one batched step (bounds its buffers: [n, ffn] floats).
  static constexpr int64_t kPrefillChunk = 256;
  // Samples a token from logits [V] (finite or -inf, at least one finite) with the options'
  // temperature, top-k and top-p.
  int32_t sample(std::span<const float> logits);
  // Benchmark helper: appends `tokens` positions of N(0, 1) keys and values to every layer's
  // cache, as if a prompt of that length had been fed (decode time depends on the cache only).
  void fill_cache_random(int64_t tokens, uint64_t seed);
  // Tokens fed so far (the stream position).
  int64_t position() const { return position_; }
  const KVCache& cache() const { return cache_; }

 private:
  struct LayerWeights {  // resolved once: feed() does no name lookups
    std::span<const float> input_norm, post_norm;
    AttentionBlockParams attn;
    ConstView2 mlp_gate, mlp_up, mlp_down;
  };
  // Tokens one batched step can take without the cache evicting keys they attend to (window
  // and sink caches once full: 0); unbounded for dense and paged caches.
  int64_t batch_room() const;
  const GptModel& model_;
  GenerateOptions options_;
  std::vector<LayerWeights> layers_;
  ConstView2 embed_, head_;
  std::span<const float> final_norm_;
  std::vector<float> zero_sinks_;  // off-by-one softmax: sink logits fixed at 0
  KVCache cache_;
  int64_t position_ = 0;
  std::mt19937_64 rng_;
  std::vector<float> x_, h_, qkv_, attn_, gate_, proj_, ff_gate_, ff_up_, ff_, logits_, probs_, rstd_;
  std::vector<int32_t> order_;
};

}  // namespace attnkit
