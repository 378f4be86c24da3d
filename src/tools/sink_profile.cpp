// Attention-sink profiler: float64 attention rows of one query per layer and head from a
// GptModel's saved q/k, averaged over windows of text, plus output-gate statistics.
#include "attnkit/tools/sink_profile.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnkit/core/error.hpp"

namespace attnkit {

void validate(const SinkProfileOptions& o, const GptConfig& c, int64_t num_tokens) {
  check(o.query_pos >= 0, "--query-pos: must be >= 0, got ", o.query_pos);
  check(o.query_pos < c.max_position_embeddings, "--query-pos: must be < the model's context ",
        c.max_position_embeddings, ", got ", o.query_pos);
  check(o.windows >= 1, "--windows: must be >= 1, got ", o.windows);
  check(o.recent >= 1, "--recent: must be >= 1, got ", o.recent);
  check(o.gate_bins >= 1 && o.gate_bins <= 1000, "--gate-bins: must be in [1, 1000], got ", o.gate_bins);
  check(o.query_pos >= c.registers, "--query-pos: must be >= the model's ", c.registers, " registers");
  check(num_tokens >= o.query_pos + 1 - c.registers, "--data: needs at least ",
        o.query_pos + 1 - c.registers, " tokens, got ", num_tokens);
}

SinkBuckets bucket_mass(std::span<const double> p, double sink, int64_t recent) {
  const int64_t n = int64_t(p.size());
  const int64_t recent_begin = std::max<int64_t>(4, n - recent);
  SinkBuckets b;
  b.sink = sink;
  for (int64_t j = 0; j < n; ++j) {
    const double x = p[size_t(j)];
    if (j == 0) b.first += x;
    else if (j < 4) b.next3 += x;
    else if (j < recent_begin) b.middle += x;
    else b.recent += x;
  }
  return b;
}

namespace {

double row_norm(const float* x, int64_t n) {  // ‖x[0, n)‖₂ in float64
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return std::sqrt(s);
}

void accumulate(SinkBuckets& a, const SinkBuckets& b, double w) {
  a.first += w * b.first, a.next3 += w * b.next3, a.middle += w * b.middle;
  a.recent += w * b.recent, a.sink += w * b.sink;
}

}  // namespace

std::span<const double> SinkProfile::row(int64_t l, int64_t h) const {
  check(l >= 0 && l < layers && h >= 0 && h < heads, "SinkProfile.row: (layer, head) out of range");
  const size_t n = size_t(query_pos + 1);
  return {mass.data() + size_t(l * heads + h) * n, n};
}

SinkBuckets SinkProfile::head_buckets(int64_t l, int64_t h, int64_t recent) const {
  return bucket_mass(row(l, h), sink_share[size_t(l * heads + h)], recent);
}

SinkBuckets SinkProfile::layer_buckets(int64_t l, int64_t recent) const {
  SinkBuckets b;
  for (int64_t h = 0; h < heads; ++h) accumulate(b, head_buckets(l, h, recent), 1.0 / double(heads));
  return b;
}

SinkBuckets SinkProfile::overall_buckets(int64_t recent) const {
  SinkBuckets b;
  for (int64_t l = 0; l < layers; ++l) accumulate(b, layer_buckets(l, recent), 1.0 / double(layers));
  return b;
}

void attention_row_probabilities(std::span<double> probs, std::span<double> sink_share,
                                 ConstView2 qkv, int64_t query, const AttentionBlockOptions& opts,
                                 std::span<const float> sinks) {
  const int64_t H = opts.heads, Hkv = opts.kv(), D = opts.head_dim, G = H / Hkv;
  const int64_t n = query + 1;
  check(query >= 0 && query < qkv.shape[0], "attention_row_probabilities: query ", query,
        " out of range [0, ", qkv.shape[0], ")");
  check(qkv.shape[1] == opts.qkv_width(), "attention_row_probabilities: qkv must have ",
        opts.qkv_width(), " columns, got ", qkv.shape[1]);
  check(int64_t(probs.size()) == H * n, "attention_row_probabilities: probs must have H·(query+1) = ",
        H * n, " entries, got ", probs.size());
  check(int64_t(sink_share.size()) == H, "attention_row_probabilities: sink_share must have ", H, " entries");
  check(opts.sink_logits != SinkLogits::kLearned || int64_t(sinks.size()) == H,
        "attention_row_probabilities: sinks must have ", H, " entries for learned sinks");
  const AttentionOptions a = opts.attention();
  const double scale = a.scale > 0 ? a.scale : 1.0 / std::sqrt(double(D));
  // Keys query `query` sees (bottom-right causal in one sequence: Lq = Lk).
  const int64_t lo = a.window_left < 0 ? 0 : std::max<int64_t>(0, query - a.window_left);
  const int64_t hi = a.window_right < 0 ? n - 1 : std::min<int64_t>(n - 1, query + a.window_right);
  for (int64_t h = 0; h < H; ++h) {
    double* p = probs.data() + h * n;
    const float* q = &qkv(query, h * D);
    const int64_t kcol = (H + h / G) * D;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      p[j] = 0;
      if (j < lo || j > hi) continue;
      const float* k = &qkv(j, kcol);
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += double(q[d]) * double(k[d]);
      s *= scale;
      if (a.softcap > 0) s = a.softcap * std::tanh(s / a.softcap);
      p[j] = s;
      m = std::max(m, s);
    }
    const bool has_sink = opts.sink_logits != SinkLogits::kNone;
    const double b = opts.sink_logits == SinkLogits::kLearned ? double(sinks[size_t(h)]) : 0.0;
    if (has_sink) m = std::max(m, b);
    double z = has_sink ? std::exp(b - m) : 0.0;
    for (int64_t j = lo; j <= hi; ++j) z += p[j] = std::exp(p[j] - m);
    for (int64_t j = lo; j <= hi; ++j) p[j] /= z;
    sink_share[size_t(h)] = has_sink ? std::exp(b - m) / z : 0.0;
  }
}

SinkProfile sink_profile(GptModel& model, std::span<const int32_t> tokens,
                         const SinkProfileOptions& opts) {
  const GptConfig& c = model.config();
  validate(opts, c, int64_t(tokens.size()));
  const int64_t L = c.num_hidden_layers, H = c.num_attention_heads, D = c.head_dim;
  const int64_t N = opts.query_pos, n = N + 1, bins = opts.gate_bins;
  const AttentionBlockOptions bo = model.block_options();
  SinkProfile r;
  const int64_t Hkv = bo.kv();
  r.layers = L, r.heads = H, r.kv_heads = Hkv, r.query_pos = N, r.windows = opts.windows;
  r.gate_bins = bins;
  r.has_sink_logit = c.sink_logits != SinkLogits::kNone;
  r.has_gate = c.gate != GateMode::kNone;
  r.mass.assign(size_t(L * H * n), 0.0);
  r.sink_share.assign(size_t(L * H), 0.0);
  r.gate_mean.assign(size_t(L * H), 0.0);
  r.gate_hist.assign(size_t(L * H * bins), 0.0);
  r.hidden_norm.assign(size_t((L + 1) * n), 0.0);
  r.key_norm.assign(size_t(L * Hkv * n), 0.0);
  std::vector<double> probs(static_cast<size_t>(H * n)), share(static_cast<size_t>(H));
  Tensor<float, 2> logits({n, c.vocab_size});
  const std::vector<int32_t> regs = gpt_register_ids(c);  // registers take positions 0..k-1
  const int64_t k = int64_t(regs.size());
  const int64_t span = int64_t(tokens.size()) - (n - k);
  std::vector<int32_t> window(regs);
  window.resize(size_t(n));
  const double inv_w = 1.0 / double(opts.windows);
  const int64_t per_head = bo.gate == GateMode::kElementwise ? D : 1;  // gate values per head per token
  const double gate_weight = 1.0 / double(opts.windows * n * per_head);
  for (int64_t w = 0; w < opts.windows; ++w) {
    const int64_t start = opts.windows == 1 ? 0 : w * span / (opts.windows - 1);
    std::copy_n(tokens.begin() + start, n - k, window.begin() + k);
    model.logits({window, {}}, logits.view());
    for (int64_t l = 0; l <= L; ++l) {
      const ConstView2 x = model.residual(l);
      for (int64_t j = 0; j < n; ++j) r.hidden_norm[size_t(l * n + j)] += inv_w * row_norm(&x(j, 0), x.shape[1]);
    }
    for (int64_t l = 0; l < L; ++l) {
      const AttentionBlockCache cache = model.attention_cache(l);
      for (int64_t g = 0; g < Hkv; ++g)
        for (int64_t j = 0; j < n; ++j)
          r.key_norm[size_t((l * Hkv + g) * n + j)] += inv_w * row_norm(&cache.qkv(j, (H + g) * D), D);
      const AttentionBlockParams params = model.block_params(l);
      attention_row_probabilities(probs, share, cache.qkv, N, bo, params.sinks);
      for (int64_t h = 0; h < H; ++h) {
        double* dst = r.mass.data() + size_t((l * H + h) * n);
        for (int64_t j = 0; j < n; ++j) dst[j] += inv_w * probs[size_t(h * n + j)];
        r.sink_share[size_t(l * H + h)] += inv_w * share[size_t(h)];
      }
      if (!r.has_gate) continue;
      for (int64_t t = 0; t < n; ++t)
        for (int64_t g = 0; g < cache.gate.shape[1]; ++g) {
          const double v = cache.gate(t, g);
          const int64_t h = g / per_head;
          const int64_t bin = std::clamp<int64_t>(int64_t(v * double(bins)), 0, bins - 1);
          r.gate_mean[size_t(l * H + h)] += gate_weight * v;
          r.gate_hist[size_t((l * H + h) * bins + bin)] += gate_weight;
        }
    }
  }
  return r;
}

}  // namespace attnkit
