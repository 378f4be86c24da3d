#pragma once
// Streaming perplexity (StreamingLLM, Xiao et al. 2023, Fig. 3): a GptModel reads one long text
// token by token and is scored on every next token, under a KV-cache policy:
//   dense      every token kept (the cache grows with the text; past the training context the
//              model sees positions it was never trained on, and that is what this shows);
//   window     the last W tokens only (the first tokens are evicted);
//   sink       the first sink_tokens tokens pinned plus the last W (StreamingLLM);
//   recompute  sliding window with re-computation: for every token, a fresh forward over the
//              last W tokens at positions 0..W-1 (no cache; cost W per token).
// dense / window / sink run through GptGenerator (decode with RoPE at cache positions).
// A model with k registers (attnkit_registers) reads them first, unscored (stream positions
// 0..k-1; the sink policy with sink_tokens = k keeps exactly them); recompute puts them before every
// window (W counts them).
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "attnkit/kv/kv_cache.hpp"
#include "attnkit/models/gpt.hpp"

namespace attnkit {

struct StreamEvalOptions {
  KVPolicy policy = KVPolicy::sink;  // dense, window, sink or recompute (not paged)
  int64_t window = 0;      // W: recent tokens kept (window, sink, recompute); 0 → the model context
  int64_t sink_tokens = 4; // sink: first tokens pinned
  int64_t tokens = 1024;   // T: tokens read; T - 1 predictions are scored
};

// Checks the options against the model and the text length; throws attnkit::Error naming the option.
void validate(const StreamEvalOptions& opts, const GptConfig& config, int64_t num_tokens);

struct StreamEvalResult {
  std::vector<double> nll;        // [T - 1] nats: -log p(tokens[t + 1] | what the cache holds at t)
  int64_t cache_tokens = 0;       // tokens held by the cache at the end (recompute: W)
  std::vector<int64_t> cache_positions;  // stream positions held at the end (layer 0)
  double mean_nll() const;        // mean of nll
};

// Streams tokens[0, T) through `model` under `opts` (see the file comment).
StreamEvalResult stream_eval(GptModel& model, std::span<const int32_t> tokens,
                             const StreamEvalOptions& opts);

}  // namespace attnkit
