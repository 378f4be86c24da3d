// Private helpers of the attention block (fast path and reference): views of q, k, v, attn and
// the gate's per-head slices, and the sink logits a mode implies.
#pragma once
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "attnkit/nn/attention_block.hpp"

namespace attnkit::nn {

// Head slice [T, H or Hkv, D] starting at column `col` of a [T, (H + 2·Hkv)·D] buffer.
template <class T>
View<T, 3> heads_view(const View<T, 2>& m, int64_t col, int64_t heads, int64_t d) {
  return {m.data + col, {m.shape[0], heads, d}, {m.stride[0], d, 1}};
}
// q, k, v views into a fused qkv buffer.
template <class T>
View<T, 3> q_of(const View<T, 2>& qkv, const AttentionBlockOptions& o) {
  return heads_view(qkv, 0, o.heads, o.head_dim);
}
template <class T>
View<T, 3> k_of(const View<T, 2>& qkv, const AttentionBlockOptions& o) {
  return heads_view(qkv, o.heads * o.head_dim, o.kv(), o.head_dim);
}
template <class T>
View<T, 3> v_of(const View<T, 2>& qkv, const AttentionBlockOptions& o) {
  return heads_view(qkv, (o.heads + o.kv()) * o.head_dim, o.kv(), o.head_dim);
}
// Columns [c0, c0 + n) of a [rows, cols] matrix.
template <class T>
View<T, 2> columns(const View<T, 2>& m, int64_t c0, int64_t n) {
  return {m.data + c0, {m.shape[0], n}, {m.stride[0], 1}};
}
// Rows [r0, r0 + n) of a [rows, cols] matrix (empty stays empty).
template <class T>
View<T, 2> rows_of(const View<T, 2>& m, int64_t r0, int64_t n) {
  if (m.data == nullptr) return m;
  return {m.data + r0 * m.stride[0], {n, m.shape[1]}, {m.stride[0], 1}};
}
// Elements [i0, i0 + n) of an optional span (empty stays empty).
template <class T>
std::span<T> sub(std::span<T> s, int64_t i0, int64_t n) {
  return s.empty() ? s : s.subspan(size_t(i0), size_t(n));
}

// Sink logits passed to the attention kernel: the learned ones, H zeros (off-by-one) or none.
inline std::span<const float> sink_logits(const AttentionBlockOptions& o,
                                          const AttentionBlockParams& p,
                                          std::vector<float>& zeros) {
  if (o.sink_logits == SinkLogits::kLearned) return p.sinks;
  if (o.sink_logits == SinkLogits::kOffByOne) {
    zeros.assign(size_t(o.heads), 0.0f);
    return zeros;
  }
  return {};
}

// The input of the o projection: gated when there is a gate, else attn.
inline ConstView2 o_input(const AttentionBlockCache& c, const AttentionBlockOptions& o) {
  return o.gate == GateMode::kNone ? ConstView2(c.attn) : ConstView2(c.gated);
}

// The pre-RoPE query a query-source gate reads: the cached copy, or q itself without RoPE.
inline ConstView2 gate_query(const AttentionBlockCache& c, const AttentionBlockOptions& o) {
  if (o.rope_theta > 0) return c.q_pre;
  return ConstView2{c.qkv.data, {c.qkv.shape[0], o.heads * o.head_dim}, {c.qkv.stride[0], 1}};
}

// Checks the backward's extra arguments (forward ones: validate_attention_block).
void validate_attention_block_backward(const char* fn, const AttentionBlockOptions& o, View2 d_x,
                                       const AttentionBlockGrads& g,
                                       const AttentionBlockScratch& s, ConstView2 d_out,
                                       ConstView2 x, const AttentionBlockParams& p);
// Gate pre-activation cache.gate_pre [T, Hg] from x or the pre-RoPE query (reference: the
// reference linear).
void gate_forward(const AttentionBlockCache& c, ConstView2 x, const AttentionBlockParams& p,
                  const AttentionBlockOptions& o, bool reference);

inline double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

}  // namespace attnkit::nn
