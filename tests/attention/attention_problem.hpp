#pragma once
// Test fixture data for attention: owns q, k, v, outputs and gradients for one packed problem,
// filled with seeded random values (ALiBi slopes follow the paper's geometric schedule), and builds
// AttentionArgs/AttentionGrads views over them.
// Buffers carry guard bands (kGuard floats of a sentinel on each side) checked by guards_intact().
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "attnkit/attention/attention.hpp"
#include "attnkit/attention/attention_reference.hpp"

namespace attnkit::testing {

constexpr int64_t kGuard = 16;
constexpr float kSentinel = -12345.0f;

// A float buffer with sentinel guard bands on both sides.
struct Guarded {
  std::vector<float> raw;
  explicit Guarded(int64_t n = 0) : raw(size_t(n + 2 * kGuard), kSentinel) {}
  float* data() { return raw.data() + kGuard; }
  const float* data() const { return raw.data() + kGuard; }
  int64_t size() const { return int64_t(raw.size()) - 2 * kGuard; }
  bool guards_intact() const {
    for (int64_t i = 0; i < kGuard; ++i)
      if (raw[size_t(i)] != kSentinel || raw[raw.size() - 1 - size_t(i)] != kSentinel) return false;
    return true;
  }
};

struct ProblemShape {
  std::vector<int32_t> lq, lk;  // per-sequence lengths (one entry = no cu_seqlens)
  int64_t h = 2, hkv = 1, d = 8;
  bool sinks = false;
  int64_t token_pad = 0;        // extra floats per token row: q/k/v become strided views
  int alibi = 0;                // ALiBi slopes: 0 none, 1 shared [H], 2 per sequence [B, H]
};

struct Problem {
  ProblemShape shape;
  int64_t tq = 0, tk = 0;
  std::vector<int32_t> cu_q, cu_k;
  Guarded q, k, v, out, lse, d_out, d_q, d_k, d_v;
  std::vector<float> sinks, d_sink, slopes;

  explicit Problem(const ProblemShape& s, uint32_t seed = 1) : shape(s) {
    cu_q.push_back(0);
    cu_k.push_back(0);
    for (size_t b = 0; b < s.lq.size(); ++b) {
      cu_q.push_back(cu_q.back() + s.lq[b]);
      cu_k.push_back(cu_k.back() + s.lk[b]);
    }
    tq = cu_q.back();
    tk = cu_k.back();
    if (s.lq.size() == 1) cu_q.clear(), cu_k.clear();
    q = Guarded(tq * row(s.h));
    k = Guarded(tk * row(s.hkv));
    v = Guarded(tk * row(s.hkv));
    out = Guarded(tq * s.h * s.d);
    lse = Guarded(s.h * tq);
    d_out = Guarded(tq * s.h * s.d);
    d_q = Guarded(tq * s.h * s.d);
    d_k = Guarded(tk * s.hkv * s.d);
    d_v = Guarded(tk * s.hkv * s.d);
    std::mt19937 rng(seed);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    for (auto* g : {&q, &k, &v, &d_out})
      for (int64_t i = 0; i < g->size(); ++i) g->data()[i] = n01(rng);
    if (s.sinks) {
      for (int64_t h = 0; h < s.h; ++h) sinks.push_back(n01(rng));
      d_sink.assign(size_t(s.h), 0.0f);
    }
    // Geometric slopes as in the ALiBi paper (2^(-8(h+1)/H)), scaled per sequence for [B, H].
    const int64_t rows = s.alibi == 2 ? int64_t(s.lq.size()) : s.alibi == 1 ? 1 : 0;
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t h = 0; h < s.h; ++h)
        slopes.push_back(std::exp2(-8.0f * float(h + 1) / float(s.h)) * (1.0f + 0.75f * float(b)));
  }

  int64_t row(int64_t heads) const { return heads * shape.d + shape.token_pad; }

  View<const float, 3> in_view(const Guarded& g, int64_t t, int64_t heads) const {
    return {g.data(), {t, heads, shape.d}, {row(heads), shape.d, 1}};
  }

  AttentionArgs args() {
    AttentionArgs a;
    a.q = in_view(q, tq, shape.h);
    a.k = in_view(k, tk, shape.hkv);
    a.v = in_view(v, tk, shape.hkv);
    a.cu_seqlens_q = cu_q;
    a.cu_seqlens_k = cu_k;
    a.sink_logits = sinks;
    a.alibi_slopes = slopes;
    a.out = View3::contiguous(out.data(), {tq, shape.h, shape.d});
    a.lse = View2::contiguous(lse.data(), {shape.h, tq});
    return a;
  }

  AttentionGrads grads() {
    return {.d_out = ConstView3::contiguous(d_out.data(), {tq, shape.h, shape.d}),
            .d_q = View3::contiguous(d_q.data(), {tq, shape.h, shape.d}),
            .d_k = View3::contiguous(d_k.data(), {tk, shape.hkv, shape.d}),
            .d_v = View3::contiguous(d_v.data(), {tk, shape.hkv, shape.d}),
            .d_sink = d_sink};
  }

  bool guards_intact() const {
    for (const auto* g : {&q, &k, &v, &out, &lse, &d_out, &d_q, &d_k, &d_v})
      if (!g->guards_intact()) return false;
    return true;
  }
};

// Max |a - b| over n elements where both are finite or equal infinities; +inf if either holds a
// NaN (two NaNs at the same place are not a match).
inline double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    if (std::isinf(a[i]) && a[i] == b[i]) continue;
    m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  }
  return m;
}

inline double max_abs(const float* a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(double(a[i])));
  return m;
}

// loss = Σ out · d_out, computed in double from a fresh forward of the double reference.
inline double reference_loss(Problem& p, const AttentionOptions& o) {
  attention_reference(o, p.args());
  double l = 0;
  for (int64_t i = 0; i < p.out.size(); ++i) l += double(p.out.data()[i]) * p.d_out.data()[i];
  return l;
}

// Central difference of reference_loss w.r.t. *x; the step is what float storage actually moved.
inline double reference_numeric_grad(Problem& p, const AttentionOptions& o, float* x) {
  const float saved = *x;
  const float h = 1e-2f;
  *x = saved + h;
  const double up = reference_loss(p, o), x_up = *x;
  *x = saved - h;
  const double down = reference_loss(p, o), x_down = *x;
  *x = saved;
  return (up - down) / (x_up - x_down);
}

}  // namespace attnkit::testing
