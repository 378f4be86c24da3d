#pragma once
// Attention-sink profiler (StreamingLLM, Xiao et al. 2023, Fig. 2): where the attention of query
// position N goes, for every layer and head of a GptModel, averaged over windows of real text;
// and the statistics of the output gates (Qiu et al. 2025) over the same windows.
//
// For each window tokens[s, s + N] (N + 1 tokens, the text's own token at position 0, exactly as
// training windows are drawn; a model with k registers gets them at positions 0..k-1 and text
// from position k), one forward runs and, per layer l and head h, the probabilities of
// query N are recomputed in float64 from the model's own q and k (after RoPE, read from the
// forward's saved activations; nothing bigger than one row per head is materialised):
//   s_j = scale · q_N·k_j   for the keys j the block's mask lets query N see
//   p_j = exp(s_j) / (Σ_j' exp(s_j') + exp(b_h))       b_h: learned sink, 0 (off-by-one), or absent
// PyTorch: softmax(cat([scale·q@kᵀ, b]))[:-1] in float64 (tests/python/test_sink_profile.py).
// Massive activations (Sun et al. 2024) over the same windows: the L2 norm of the residual stream
// and of every key (after RoPE, which keeps norms) by position.
#include <cstdint>
#include <span>
#include <vector>

#include "attnkit/core/tensor.hpp"
#include "attnkit/models/gpt.hpp"
#include "attnkit/nn/attention_block.hpp"

namespace attnkit {

struct SinkProfileOptions {
  int64_t query_pos = 127;   // N: the query's position in each window (0-based)
  int64_t windows = 16;      // windows of N + 1 tokens, spread evenly over the text
  int64_t recent = 64;       // keys counted as "most recent"
  int64_t gate_bins = 10;    // histogram bins of the gate values over [0, 1]
};

// Checks the options against a model and a token count; throws attnkit::Error naming the option.
void validate(const SinkProfileOptions& opts, const GptConfig& config, int64_t num_tokens);

// Mass of one probability row [N + 1] in four disjoint key groups (plus the sink logit's share):
// token 0, tokens 1-3, the middle, and the `recent` most recent keys (never overlapping 0-3).
struct SinkBuckets {
  double first = 0, next3 = 0, middle = 0, recent = 0, sink = 0;
};
SinkBuckets bucket_mass(std::span<const double> probs, double sink, int64_t recent);

struct SinkProfile {
  int64_t layers = 0, heads = 0, kv_heads = 0, query_pos = 0, windows = 0, gate_bins = 0;
  bool has_sink_logit = false;       // learned sinks or off-by-one softmax
  bool has_gate = false;
  std::vector<double> mass;          // [L, H, N + 1] mean probability of key j (window average)
  std::vector<double> sink_share;    // [L, H] mean probability of the sink logit (0 without one)
  std::vector<double> gate_mean;     // [L, H] mean sigmoid gate over every token (and element)
  std::vector<double> gate_hist;     // [L, H, bins] fraction of gate values per bin of [0, 1]
  std::vector<double> hidden_norm;   // [L + 1, N + 1] mean ‖residual‖₂ entering layer l at position j
                                     // (row L: the last layer's output, before the final norm)
  std::vector<double> key_norm;      // [L, Hkv, N + 1] mean ‖k_j‖₂ of KV head g in layer l

  // Mean over windows of probability rows for layer l, head h: [N + 1].
  std::span<const double> row(int64_t l, int64_t h) const;
  // The buckets of one head, of one layer (mean over heads), or overall (mean over all heads).
  SinkBuckets head_buckets(int64_t l, int64_t h, int64_t recent) const;
  SinkBuckets layer_buckets(int64_t l, int64_t recent) const;
  SinkBuckets overall_buckets(int64_t recent) const;
};

// Probabilities [H, N + 1] (row h, key j; masked keys 0) and sink shares [H] of query `query`
// of one layer, in float64, from that layer's saved qkv [T, (H + 2·Hkv)·D] (after RoPE) of a
// single sequence starting at row 0, with the block's mask, scale and sink logits `sinks` ([H];
// empty with opts.sink_logits == kLearned is an error; ignored otherwise).
void attention_row_probabilities(std::span<double> probs, std::span<double> sink_share,
                                 ConstView2 qkv, int64_t query, const AttentionBlockOptions& opts,
                                 std::span<const float> sinks);

// The profile of `model` over windows of `tokens` (see the file comment).
SinkProfile sink_profile(GptModel& model, std::span<const int32_t> tokens,
                         const SinkProfileOptions& opts);

}  // namespace attnkit
