// Streaming perplexity of a GptModel under dense / window / sink KV caches (through the decode
// path of GptGenerator) or a re-computed sliding window (a full forward per token).
#include "attnkit/tools/stream_eval.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attnkit/core/error.hpp"
#include "attnkit/models/gpt_generate.hpp"

namespace attnkit {

void validate(const StreamEvalOptions& o, const GptConfig& c, int64_t num_tokens) {
  check(o.tokens >= 2, "--tokens: must be >= 2, got ", o.tokens);
  check(o.tokens <= num_tokens, "--tokens: the text has only ", num_tokens, " tokens, asked for ", o.tokens);
  check(o.window >= 0, "--window: must be >= 0, got ", o.window);
  check(o.sink_tokens >= 0, "--sink-tokens: must be >= 0, got ", o.sink_tokens);
  check(o.policy != KVPolicy::paged, "--policy: streaming evaluation takes dense, window, sink or recompute, got paged");
  check(o.policy != KVPolicy::recompute || o.window == 0 || o.window > c.registers,
        "--window: recompute's window must exceed the model's ", c.registers, " registers");
  check(o.policy != KVPolicy::recompute || o.window == 0 || o.window <= c.max_position_embeddings,
        "--window: recompute runs a forward over the window, so it must be <= the context ",
        c.max_position_embeddings);
}

double StreamEvalResult::mean_nll() const {
  return nll.empty() ? 0.0 : std::accumulate(nll.begin(), nll.end(), 0.0) / double(nll.size());
}

namespace {

double token_nll(std::span<const float> logits, int32_t target) {  // -log softmax(logits)[target]
  const float m = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float x : logits) z += std::exp(double(x) - m);
  return std::log(z) + m - double(logits[size_t(target)]);
}

StreamEvalResult recompute(GptModel& model, std::span<const int32_t> tokens, int64_t T, int64_t W) {
  StreamEvalResult r;
  const int64_t V = model.config().vocab_size;
  const std::vector<int32_t> regs = gpt_register_ids(model.config());  // every window starts with them
  const int64_t k = int64_t(regs.size());
  Tensor<float, 2> logits({1, V});
  std::vector<int32_t> window;
  for (int64_t t = 0; t + 1 < T; ++t) {
    const int64_t lo = std::max<int64_t>(0, t - (W - k) + 1), n = k + t - lo + 1;
    window.assign(regs.begin(), regs.end());
    window.insert(window.end(), tokens.begin() + lo, tokens.begin() + t + 1);
    if (logits.view().shape[0] != n) logits = Tensor<float, 2>({n, V});
    model.logits({window, {}}, logits.view());
    r.nll.push_back(token_nll({logits.data() + (n - 1) * V, size_t(V)}, tokens[size_t(t + 1)]));
  }
  r.cache_tokens = std::min(W, T - 1);
  for (int64_t p = T - 1 - r.cache_tokens; p < T - 1; ++p) r.cache_positions.push_back(p);
  return r;
}

}  // namespace

StreamEvalResult stream_eval(GptModel& model, std::span<const int32_t> tokens, const StreamEvalOptions& opts) {
  const GptConfig& c = model.config();
  validate(opts, c, int64_t(tokens.size()));
  const int64_t T = opts.tokens, W = opts.window > 0 ? opts.window : c.max_position_embeddings;
  if (opts.policy == KVPolicy::recompute) return recompute(model, tokens, T, W);
  GenerateOptions g{.temperature = 0};
  if (opts.policy == KVPolicy::dense) {
    g.capacity = T;
  } else {
    g.sink_tokens = opts.policy == KVPolicy::sink ? opts.sink_tokens : 0;
    g.window = W;
  }
  const std::vector<int32_t> regs = gpt_register_ids(c);
  if (opts.policy == KVPolicy::dense) g.capacity += int64_t(regs.size());
  GptGenerator gen(model, g);
  for (int32_t id : regs) gen.feed(id);  // the registers open the stream, unscored
  StreamEvalResult r;
  r.nll.reserve(size_t(T - 1));
  for (int64_t t = 0; t + 1 < T; ++t)
    r.nll.push_back(token_nll(gen.feed(tokens[size_t(t)]), tokens[size_t(t + 1)]));
  r.cache_tokens = gen.cache().cached(0, 0);
  r.cache_positions = gen.cache().positions(0, 0);
  return r;
}

}  // namespace attnkit
