// Reference attention, forward and backward: the executable spec of the attention contract
// (docs/architecture.md).
// Per query row, in double: t_j = softcap(scale·q·k_j) over visible keys j, the logit
// s_j = t_j - m_h·|i + Lk - Lq - j| (ALiBi slope m_h, 0 without), lse = log(Σ_j e^{s_j} + e^{b_h}),
// P_j = e^{s_j - lse} (computed as e^{s_j - m} / Σ with m the row max), out = Σ_j P_j·Z_j·v_j
// with the dropout factor Z_j = keep/(1-p).
// Backward (FlashAttention-2 notation): dP_j = Z_j·(dO·v_j), Δ = dO·out, dT_j = P_j·(dP_j - Δ)
// (the ALiBi bias is a constant: ds_j/dt_j = 1), dS_j = dT_j·(1 - (t_j/c)²) with softcap c,
// dq = scale·Σ_j dS_j·k_j, dk_j += scale·dS_j·q, dv_j += P_j·Z_j·dO, and the sink (a key with
// value 0): d b_h = -Σ_i e^{b_h - lse_i}·Δ_i.
#include "attnkit/attention/attention_reference.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "attnkit/core/rng.hpp"

namespace attnkit {
namespace {

struct Row {  // one query row of one head, in double
  KeyRange keys;
  std::vector<double> t;     // softcapped scores of the visible keys (before the ALiBi bias)
  std::vector<double> s;     // logits: t plus the ALiBi bias
  std::vector<double> p;     // probabilities P_j (without dropout)
  std::vector<double> z;     // dropout factors Z_j
  double lse = -std::numeric_limits<double>::infinity();
  double sink_prob = 0;      // e^{b_h - lse}
};

Row compute_row(const AttentionOptions& o, const AttentionArgs& a, const SeqSpan& s, int64_t b,
                int64_t h, int64_t i) {
  const int64_t lq = s.q_end - s.q_begin, lk = s.k_end - s.k_begin;
  const int64_t d = a.q.shape[2], g = a.q.shape[1] / a.k.shape[1];
  const double scale = effective_scale(o, d);
  Row r;
  r.keys = visible_keys(o, i, lq, lk);
  const int64_t n = r.keys.hi - r.keys.lo;
  r.t.resize(size_t(n));
  r.s.resize(size_t(n));
  r.p.resize(size_t(n));
  r.z.resize(size_t(n));
  const float* q = a.q.ptr(s.q_begin + i, h);
  const double slope = alibi_slope(a, b, h);
  const int64_t diag = i + lk - lq;
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t jj = 0; jj < n; ++jj) {
    const float* k = a.k.ptr(s.k_begin + r.keys.lo + jj, h / g);
    double dot = 0;
    for (int64_t e = 0; e < d; ++e) dot += double(q[e]) * double(k[e]);
    double t = scale * dot;
    if (o.softcap > 0) t = o.softcap * std::tanh(t / o.softcap);
    r.t[size_t(jj)] = t;
    const double logit = t - slope * double(std::abs(diag - (r.keys.lo + jj)));
    r.s[size_t(jj)] = logit;
    m = std::max(m, logit);
  }
  const bool has_sink = !a.sink_logits.empty();
  const double sink = has_sink ? double(a.sink_logits[size_t(h)]) : 0.0;
  if (has_sink) m = std::max(m, sink);
  if (n == 0 && !has_sink) return r;  // fully masked row: zeros, lse = -inf
  double sum = has_sink ? std::exp(sink - m) : 0.0;
  for (double x : r.s) sum += std::exp(x - m);
  r.lse = m + std::log(sum);
  // P from the max and the sum, not from lse: at |m| above about 2^53 the log of the sum is
  // absorbed by m in lse, and e^{s - lse} would not sum to 1.
  r.sink_prob = has_sink ? std::exp(sink - m) / sum : 0.0;
  const double keep_scale = 1.0 / (1.0 - double(o.dropout_p));
  for (int64_t jj = 0; jj < n; ++jj) {
    r.p[size_t(jj)] = std::exp(r.s[size_t(jj)] - m) / sum;
    const bool keep = o.dropout_p == 0 ||
                      dropout_keep(o.seed, o.dropout_p, uint32_t(b), uint32_t(h), uint32_t(i),
                                   uint32_t(r.keys.lo + jj));
    r.z[size_t(jj)] = keep ? keep_scale : 0.0;
  }
  return r;
}

}  // namespace

void attention_reference(const AttentionOptions& o, const AttentionArgs& a) {
  validate(o, a);
  check(!a.out.empty() || a.q.numel() == 0, "out: the forward needs an output view");
  const int64_t nh = a.q.shape[1], d = a.q.shape[2], g = nh / a.k.shape[1];
  std::vector<double> acc(static_cast<size_t>(d));
  for (int64_t b = 0; b < num_sequences(a); ++b) {
    const SeqSpan s = sequence_span(a, b);
    for (int64_t i = 0; i < s.q_end - s.q_begin; ++i)
      for (int64_t h = 0; h < nh; ++h) {
        const Row r = compute_row(o, a, s, b, h, i);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t jj = 0; jj < r.p.size(); ++jj) {
          const double w = r.p[jj] * r.z[jj];
          const float* v = a.v.ptr(s.k_begin + r.keys.lo + int64_t(jj), h / g);
          for (int64_t e = 0; e < d; ++e) acc[size_t(e)] += w * double(v[e]);
        }
        float* out = a.out.ptr(s.q_begin + i, h);
        for (int64_t e = 0; e < d; ++e) out[e] = float(acc[size_t(e)]);
        if (!a.lse.empty()) a.lse(h, s.q_begin + i) = float(r.lse);
      }
  }
}

void attention_reference_backward(const AttentionOptions& o, const AttentionArgs& a,
                                  const AttentionGrads& gr) {
  validate_backward(o, a, gr);
  const int64_t nh = a.q.shape[1], d = a.q.shape[2], hkv = a.k.shape[1], g = nh / hkv;
  const double scale = effective_scale(o, d);
  // dk, dv and dsink gather contributions from many rows: accumulate in double, assign at the end.
  std::vector<double> dk(static_cast<size_t>(a.k.shape[0] * hkv * d)), dv(dk.size()), dsink(static_cast<size_t>(nh));
  auto kv_at = [&](int64_t t, int64_t hk) { return size_t((t * hkv + hk) * d); };
  std::vector<double> out(static_cast<size_t>(d)), dq(static_cast<size_t>(d));
  for (int64_t b = 0; b < num_sequences(a); ++b) {
    const SeqSpan s = sequence_span(a, b);
    for (int64_t i = 0; i < s.q_end - s.q_begin; ++i)
      for (int64_t h = 0; h < nh; ++h) {
        const Row r = compute_row(o, a, s, b, h, i);
        const float* q = a.q.ptr(s.q_begin + i, h);
        const float* dout = gr.d_out.ptr(s.q_begin + i, h);
        std::fill(out.begin(), out.end(), 0.0);
        std::fill(dq.begin(), dq.end(), 0.0);
        for (size_t jj = 0; jj < r.p.size(); ++jj) {
          const float* v = a.v.ptr(s.k_begin + r.keys.lo + int64_t(jj), h / g);
          for (int64_t e = 0; e < d; ++e) out[size_t(e)] += r.p[jj] * r.z[jj] * double(v[e]);
        }
        double delta = 0;  // Δ = dO·out
        for (int64_t e = 0; e < d; ++e) delta += double(dout[e]) * out[size_t(e)];
        dsink[size_t(h)] -= r.sink_prob * delta;
        for (size_t jj = 0; jj < r.p.size(); ++jj) {
          const int64_t key = s.k_begin + r.keys.lo + int64_t(jj);
          const float* k = a.k.ptr(key, h / g);
          const float* v = a.v.ptr(key, h / g);
          double dov = 0;
          for (int64_t e = 0; e < d; ++e) dov += double(dout[e]) * double(v[e]);
          const double dp = r.z[jj] * dov;
          double ds = r.p[jj] * (dp - delta);
          if (o.softcap > 0) {
            const double th = r.t[jj] / o.softcap;
            ds *= 1.0 - th * th;
          }
          double* dkj = &dk[kv_at(key, h / g)];
          double* dvj = &dv[kv_at(key, h / g)];
          const double pz = r.p[jj] * r.z[jj];
          for (int64_t e = 0; e < d; ++e) {
            dq[size_t(e)] += scale * ds * double(k[e]);
            dkj[e] += scale * ds * double(q[e]);
            dvj[e] += pz * double(dout[e]);
          }
        }
        float* dqi = gr.d_q.ptr(s.q_begin + i, h);
        for (int64_t e = 0; e < d; ++e) dqi[e] = float(dq[size_t(e)]);
      }
  }
  for (int64_t t = 0; t < a.k.shape[0]; ++t)
    for (int64_t hk = 0; hk < hkv; ++hk) {
      float* dkp = gr.d_k.ptr(t, hk);
      float* dvp = gr.d_v.ptr(t, hk);
      for (int64_t e = 0; e < d; ++e) {
        dkp[e] = float(dk[kv_at(t, hk) + size_t(e)]);
        dvp[e] = float(dv[kv_at(t, hk) + size_t(e)]);
      }
    }
  for (size_t h = 0; h < gr.d_sink.size(); ++h) gr.d_sink[h] = float(dsink[h]);
}

}  // namespace attnkit
