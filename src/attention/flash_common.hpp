#pragma once
// Internal pieces shared by the flash forward and backward: the per-call context, gathering a
// stacked query tile (rows = positions × G, position-major), and biasing (ALiBi) and masking a
// block of scores.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attnkit/attention/flash_attention.hpp"
#include "attnkit/core/rng.hpp"
#include "attnkit/ops/vec_math.hpp"

namespace attnkit::flash {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Least work of one parallel item of the forward or backward, in visible query-key pairs (rows ×
// keys): items of tiny sequences (a ViT's 16 patches: 256 pairs per head) run in groups of
// consecutive items of at least this much (parallel_for_grouped).
// (Measured on a ViT's shape, B 128, L 16, H 4, D 24, 2 threads: forward 1.19 → 0.74 ms, backward
// 1.59 → 1.21 ms; docs/performance-data.md.)
constexpr double kMinItemCost = 16384;

struct Context {
  const AttentionOptions& opts;
  const AttentionArgs& args;
  int64_t h, hkv, g, d;
  float scale;
  bool has_sink, has_alibi;

  Context(const AttentionOptions& o, const AttentionArgs& a)
      : opts(o), args(a), h(a.q.shape[1]), hkv(a.k.shape[1]), g(h / hkv), d(a.q.shape[2]),
        scale(effective_scale(o, a.q.shape[2])), has_sink(!a.sink_logits.empty()),
        has_alibi(!a.alibi_slopes.empty()) {}

  // Row stride of K or V for sgemm (BLAS wants ld >= D even for a single row).
  int64_t ld(const ConstView3& t) const { return std::max<int64_t>(t.stride[0], d); }
};

// Query positions per forward/backward tile for group size g.
inline int64_t positions_per_tile(int64_t rows_per_tile, int64_t g, int64_t max_positions) {
  return std::clamp<int64_t>(rows_per_tile / g, 1, max_positions);
}

// dst[(i - i0)·G + g, :] = factor · src(token_base + i, hk·G + g, :) for i in [i0, i1).
inline void gather_rows(const ConstView3& src, const Context& c, int64_t token_base, int64_t hk,
                        int64_t i0, int64_t i1, float factor, float* dst) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t gg = 0; gg < c.g; ++gg) {
      const float* s = src.ptr(token_base + i, hk * c.g + gg);
      float* o = dst + ((i - i0) * c.g + gg) * c.d;
      for (int64_t e = 0; e < c.d; ++e) o[e] = factor * s[e];
    }
}

// Sets x[j] = -inf for keys k0 + j outside query i's visible range (x holds keys [k0, k0 + n)).
inline void mask_row(float* x, int64_t n, int64_t k0, const KeyRange& vis) {
  const int64_t lo = std::clamp<int64_t>(vis.lo - k0, 0, n);
  const int64_t hi = std::clamp<int64_t>(vis.hi - k0, lo, n);
  std::fill(x, x + lo, kNegInf);
  std::fill(x + hi, x + n, kNegInf);
}

// ALiBi bias of one row: x[j], the score of key k0 + j, gains -slope·|diag - (k0 + j)| with
// diag = i + Lk - Lq (n <= a tile, so the distance is exact in float32 below 2^24 tokens).
inline void alibi_row(float* x, int64_t n, int64_t k0, int64_t diag, float slope) {
  const float c = float(diag - k0);
  for (int32_t j = 0; j < int32_t(n); ++j) x[j] -= slope * std::abs(c - float(j));
}

// ALiBi of one row for online_softmax_row: slope 0 = off (the row skips the bias pass).
struct RowBias {
  float slope = 0;
  int64_t diag = 0;  // i + Lk - Lq: the key at zero distance
};

// One row's online-softmax step (shared by the flash forward and decode): scores x[n] of keys
// [k0, k0 + n) are softcapped, biased (ALiBi) and masked (when `masked`, to `vis`), the running
// max m grows, x ← exp(x - m), the running sum l gains Σx, and o[d] and l are rescaled when m
// grows. Returns false, with x zeroed, while the row has seen no visible key. exp_sum computes
// the exponentials and their sum (exp_sub_sum's contract).
inline bool online_softmax_row(float* x, int64_t n, float softcap, RowBias bias, bool masked,
                               int64_t k0, const KeyRange& vis, float& m, float& l, float* o,
                               int64_t d, float (*exp_sum)(float*, int64_t, float) = exp_sub_sum) {
  if (softcap > 0) softcap_inplace(x, n, softcap);
  if (bias.slope != 0) alibi_row(x, n, k0, bias.diag, bias.slope);
  if (masked) mask_row(x, n, k0, vis);
  const float m_new = std::max(m, row_max(x, n));
  if (m_new == kNegInf) {
    std::fill(x, x + n, 0.0f);
    return false;
  }
  const float sum = exp_sum(x, n, m_new);
  if (m_new != m) {  // rescale only when the running max grows
    const float alpha = std::exp(m - m_new);
    l *= alpha;
    scale_inplace(o, d, alpha);
    m = m_new;
  }
  l += sum;
  return true;
}

// Keys per chunk of dropout factors (a stack buffer; rows of any length go chunk by chunk).
constexpr int64_t kDropoutChunk = 64;

// z[j] = dropout factor of key k0 + j (j < n <= kDropoutChunk) for query i, head hq, sequence b:
// 0 if dropped, 1/(1-p) if kept. The mask is the reference's (seed, b, hq, i, j).
inline void dropout_factors(float* z, int64_t n, int64_t k0, const AttentionOptions& o, int64_t b,
                            int64_t hq, int64_t i) {
  dropout_keep_factors(o.seed, o.dropout_p, 1.0f / (1.0f - o.dropout_p), uint32_t(b), uint32_t(hq),
                       uint32_t(i), uint32_t(k0), n, z);
}

// Multiplies x[j] (probabilities of keys k0 + j for query i, head hq, sequence b) by the dropout
// factor (dropout_factors).
inline void apply_dropout(float* x, int64_t n, int64_t k0, const AttentionOptions& o, int64_t b,
                          int64_t hq, int64_t i) {
  float z[kDropoutChunk];
  for (int64_t c0 = 0; c0 < n; c0 += kDropoutChunk) {
    const int64_t m = std::min(kDropoutChunk, n - c0);
    dropout_factors(z, m, k0 + c0, o, b, hq, i);
    for (int64_t j = 0; j < m; ++j) x[c0 + j] *= z[j];
  }
}

}  // namespace attnkit::flash
