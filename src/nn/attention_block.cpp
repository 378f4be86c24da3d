// Attention block fast path: fused QKV linear (sgemm) → RoPE in place on the q/k slices → flash
// attention → sigmoid gate → o projection. See include/attnkit/nn/attention_block.hpp for the
// formulas; the backward is in attention_block_backward.cpp, the reference in
// attention_block_reference.cpp. PyTorch: tests/python/test_attention_block.py's `block`.
#include "attnkit/nn/attention_block.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include "attention_block_common.hpp"
#include "attnkit/attention/flash_attention.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/rope.hpp"
#include "nn_common.hpp"

namespace attnkit {

AttentionOptions AttentionBlockOptions::attention() const {
  return {.scale = scale, .window_left = window_left, .window_right = causal ? 0 : window_right,
          .dropout_p = dropout_p, .seed = dropout_seed};
}

AttentionBlockWorkspace::AttentionBlockWorkspace(const AttentionBlockOptions& o, int64_t t) {
  check(o.heads >= 1 && o.kv() >= 1 && o.head_dim >= 1, "AttentionBlockWorkspace: opts: heads, ",
        "kv_heads and head_dim must be >= 1, got ", o.heads, ", ", o.kv(), ", ", o.head_dim);
  check(t >= 0, "AttentionBlockWorkspace: tokens: expected >= 0, got ", t);
  const int64_t hd = o.heads * o.head_dim, hg = o.gate_width();
  qkv_ = Tensor<float, 2>({t, o.qkv_width()});
  attn_ = Tensor<float, 2>({t, hd});
  lse_ = Tensor<float, 2>({o.heads, t});
  d_qkv_ = Tensor<float, 2>({t, o.qkv_width()});
  d_attn_ = Tensor<float, 2>({t, hd});
  if (hg > 0) {
    gate_pre_ = Tensor<float, 2>({t, hg});
    gate_ = Tensor<float, 2>({t, hg});
    gated_ = Tensor<float, 2>({t, hd});
    d_gate_ = Tensor<float, 2>({t, hg});
    if (o.gate_source == GateSource::kQuery && o.rope_theta > 0) q_pre_ = Tensor<float, 2>({t, hd});
  }
  if (o.sink_logits != SinkLogits::kNone) d_sink_ = Tensor<float, 2>({1, o.heads});
}

void AttentionBlockWorkspace::resize(int64_t t) {
  check(t >= 0, "AttentionBlockWorkspace.resize: tokens: expected >= 0, got ", t);
  // Per-token buffers keep their width; those never sized (no gate, no query gate) stay empty.
  for (Tensor<float, 2>* x : {&qkv_, &attn_, &d_qkv_, &d_attn_, &gate_pre_, &gate_, &gated_, &d_gate_, &q_pre_})
    if (x->shape()[1] > 0) x->resize({t, x->shape()[1]});
  lse_.resize({lse_.shape()[0], t});  // [H, T]
}

namespace {
// A view of an owned tensor, or an empty view when the tensor was never sized.
View2 view_or_empty(Tensor<float, 2>& t) {
  return t.shape() == std::array<int64_t, 2>{0, 0} ? View2{} : t.view();
}
}  // namespace

AttentionBlockCache AttentionBlockWorkspace::cache() {
  return {qkv_.view(), attn_.view(), lse_.view(), view_or_empty(gate_pre_), view_or_empty(gate_),
          view_or_empty(gated_), view_or_empty(q_pre_)};
}

AttentionBlockScratch AttentionBlockWorkspace::scratch() {
  return {d_qkv_.view(), d_attn_.view(), view_or_empty(d_gate_), view_or_empty(d_sink_)};
}

namespace {

// A view that must be [rows, cols] when `required`, and absent (null) otherwise.
template <class T>
void check_optional(const View<T, 2>& v, bool required, const char* fn, const char* name,
                    const char* dims, int64_t rows, int64_t cols, const char* why) {
  if (required) {
    check(v.data != nullptr || rows * cols == 0, fn, ": ", name, ": required (", why,
          ") but empty");
    nn::check_matrix(v, fn, name, dims, rows, cols);
  } else {
    check(v.data == nullptr, fn, ": ", name, ": must be empty unless ", why);
  }
}

template <class T>
void check_optional_span(std::span<T> s, bool required, const char* fn, const char* name,
                         const char* dims, int64_t n, const char* why) {
  if (required)
    check(int64_t(s.size()) == n, fn, ": ", name, ": expected ", dims, " = ", n,
          " elements (", why, "), got ", s.size());
  else
    check(s.empty(), fn, ": ", name, ": must be empty unless ", why, ", got ", s.size(),
          " elements");
}

void check_options(const char* fn, const AttentionBlockOptions& o) {
  check(o.heads >= 1, fn, ": opts.heads: expected >= 1, got ", o.heads);
  check(o.kv_heads >= 0 && o.kv() <= o.heads && o.heads % o.kv() == 0, fn,
        ": opts.kv_heads: must divide heads = ", o.heads, ", got ", o.kv_heads);
  check(o.head_dim >= 1, fn, ": opts.head_dim: expected >= 1, got ", o.head_dim);
  check(std::isfinite(o.rope_theta) && o.rope_theta >= 0, fn,
        ": opts.rope_theta: expected a finite value >= 0 (0 = no RoPE), got ", o.rope_theta);
  check(o.rope_theta == 0 || o.head_dim % 2 == 0, fn,
        ": opts.head_dim: must be even with RoPE, got ", o.head_dim);
  check(!o.causal || o.window_right == -1 || o.window_right == 0, fn,
        ": opts.window_right: must be -1 or 0 when causal, got ", o.window_right);
  check(o.window_left >= -1 && o.window_right >= -1, fn,
        ": opts.window_left/window_right: must be >= -1, got (", o.window_left, ", ",
        o.window_right, ")");
}

}  // namespace

void validate_attention_block(const char* fn, const AttentionBlockOptions& o, ConstView2 x,
                              const AttentionBlockBatch& batch, const AttentionBlockParams& p,
                              const AttentionBlockCache& c) {
  check_options(fn, o);
  const int64_t t = x.shape[0], ch = x.shape[1], hd = o.heads * o.head_dim, hg = o.gate_width();
  nn::check_matrix(x, fn, "x", "[T, C]", t, ch);
  check(o.rope_theta == 0 || int64_t(batch.positions.size()) == t, fn,
        ": positions: expected [T] = ", t, " elements, got ", batch.positions.size());
  const auto cu = batch.cu_seqlens;
  if (!cu.empty()) {
    check(cu.size() >= 2 && cu[0] == 0 && cu.back() == t, fn,
          ": cu_seqlens: expected B+1 >= 2 entries from 0 to T = ", t, ", got ", cu.size(),
          " entries ending at ", cu.back());
    for (size_t i = 1; i < cu.size(); ++i)
      check(cu[i] >= cu[i - 1], fn, ": cu_seqlens: must be non-decreasing, entry ", i, " = ",
            cu[i], " < ", cu[i - 1]);
  }
  for (size_t i = 0; i < batch.positions.size(); ++i)
    check(batch.positions[i] >= 0, fn, ": positions[", i, "] = ", batch.positions[i],
          " is negative");
  nn::check_matrix(p.qkv_proj_weight, fn, "qkv_proj_weight", "[(H + 2·Hkv)·D, C]", o.qkv_width(),
                   ch);
  check_optional_span(p.qkv_proj_bias, o.qkv_bias, fn, "qkv_proj_bias", "[(H + 2·Hkv)·D]",
                      o.qkv_width(), "opts.qkv_bias");
  nn::check_matrix(p.o_proj_weight, fn, "o_proj_weight", "[C, H·D]", ch, hd);
  check_optional_span(p.o_proj_bias, o.o_bias, fn, "o_proj_bias", "[C]", ch, "opts.o_bias");
  check_optional_span(p.sinks, o.sink_logits == SinkLogits::kLearned, fn, "sinks", "[H]", o.heads,
                      "opts.sink_logits is learned");
  const bool gate = o.gate != GateMode::kNone, query = o.gate_source == GateSource::kQuery;
  if (query)
    check_optional(p.gate_proj_weight, gate, fn, "gate_proj_weight",
                   o.gate == GateMode::kHeadwise ? "[H, D]" : "[H·D, D]", hg, o.head_dim,
                   "opts.gate is set");
  else
    check_optional(p.gate_proj_weight, gate, fn, "gate_proj_weight", "[Hg, C]", hg, ch,
                   "opts.gate is set");
  check_optional_span(p.gate_proj_bias, gate && o.gate_bias, fn, "gate_proj_bias", "[Hg]", hg,
                      "opts.gate is set and opts.gate_bias");
  nn::check_matrix(c.qkv, fn, "cache.qkv", "[T, (H + 2·Hkv)·D]", t, o.qkv_width());
  nn::check_matrix(c.attn, fn, "cache.attn", "[T, H·D]", t, hd);
  nn::check_matrix(c.lse, fn, "cache.lse", "[H, T]", o.heads, t);
  check_optional(c.gate_pre, gate, fn, "cache.gate_pre", "[T, Hg]", t, hg, "opts.gate is set");
  check_optional(c.gate, gate, fn, "cache.gate", "[T, Hg]", t, hg, "opts.gate is set");
  check_optional(c.gated, gate, fn, "cache.gated", "[T, H·D]", t, hd, "opts.gate is set");
  check_optional(c.q_pre, gate && query && o.rope_theta > 0, fn, "cache.q_pre", "[T, H·D]", t, hd,
                 "the gate reads the query and RoPE is on");
}

namespace nn {

void validate_attention_block_backward(const char* fn, const AttentionBlockOptions& o,
                                       View2 d_x, const AttentionBlockGrads& g,
                                       const AttentionBlockScratch& s, ConstView2 d_out,
                                       ConstView2 x, const AttentionBlockParams& p) {
  const int64_t t = x.shape[0], ch = x.shape[1], hd = o.heads * o.head_dim, hg = o.gate_width();
  nn::check_matrix(d_out, fn, "d_out", "[T, C]", t, ch);
  nn::check_matrix(d_x, fn, "d_x", "[T, C]", t, ch);
  auto like = [&](auto grad, auto param, const char* name) {
    if (grad.data != nullptr || param.data == nullptr)
      check(grad.data == nullptr || grad.shape == param.shape, fn, ": grads.", name,
            ": shape must equal the parameter's [", param.shape[0], ", ", param.shape[1], "]");
    if (grad.data != nullptr) nn::check_matrix(grad, fn, name, "parameter", param.shape[0],
                                               param.shape[1]);
  };
  auto like_span = [&](auto grad, auto param, const char* name) {
    check(grad.empty() || grad.size() == param.size(), fn, ": grads.", name, ": expected 0 or ",
          param.size(), " elements, got ", grad.size());
  };
  like(g.qkv_proj_weight, p.qkv_proj_weight, "qkv_proj_weight");
  like_span(g.qkv_proj_bias, p.qkv_proj_bias, "qkv_proj_bias");
  like(g.o_proj_weight, p.o_proj_weight, "o_proj_weight");
  like_span(g.o_proj_bias, p.o_proj_bias, "o_proj_bias");
  like_span(g.sinks, p.sinks, "sinks");
  if (g.gate_proj_weight.data != nullptr)
    check(p.gate_proj_weight.data != nullptr, fn, ": grads.gate_proj_weight: given without a gate");
  like(g.gate_proj_weight, p.gate_proj_weight, "gate_proj_weight");
  like_span(g.gate_proj_bias, p.gate_proj_bias, "gate_proj_bias");
  nn::check_matrix(s.d_qkv, fn, "scratch.d_qkv", "[T, (H + 2·Hkv)·D]", t, o.qkv_width());
  nn::check_matrix(s.d_attn, fn, "scratch.d_attn", "[T, H·D]", t, hd);
  check_optional(s.d_gate, hg > 0, fn, "scratch.d_gate", "[T, Hg]", t, hg, "opts.gate is set");
  check_optional(s.d_sink, o.sink_logits != SinkLogits::kNone, fn, "scratch.d_sink", "[1, H]", 1, o.heads,
                 "opts.sink_logits is set");
}

// Gate pre-activation g [T, Hg] from x (input source) or from each head's pre-RoPE query.
void gate_forward(const AttentionBlockCache& c, ConstView2 x, const AttentionBlockParams& p,
                  const AttentionBlockOptions& o, bool reference) {
  auto lin = reference ? linear_forward_reference : linear_forward;
  if (o.gate_source == GateSource::kInput) {
    lin(c.gate_pre, x, p.gate_proj_weight, p.gate_proj_bias);
    return;
  }
  const int64_t w = o.gate == GateMode::kHeadwise ? 1 : o.head_dim, d = o.head_dim;
  const ConstView2 q = gate_query(c, o);
  for (int64_t h = 0; h < o.heads; ++h)  // head h: g_h[T, w] = q_h[T, D]·W_h[w, D]ᵀ + b_h
    lin(columns(c.gate_pre, h * w, w), columns(q, h * d, d), rows_of(p.gate_proj_weight, h * w, w),
        sub(p.gate_proj_bias, h * w, w));
}

}  // namespace nn

void attention_block_forward(View2 out, const AttentionBlockCache& c, ConstView2 x,
                             const AttentionBlockBatch& batch, const AttentionBlockParams& p,
                             const AttentionBlockOptions& o) {
  const char* fn = "attention_block_forward";
  validate_attention_block(fn, o, x, batch, p, c);
  nn::check_matrix(out, fn, "out", "[T, C]", x.shape[0], x.shape[1]);
  const int64_t t = x.shape[0], d = o.head_dim, hd = o.heads * d, hg = o.gate_width();
  linear_forward(c.qkv, x, p.qkv_proj_weight, p.qkv_proj_bias);
  const View3 q = nn::q_of(c.qkv, o), k = nn::k_of(c.qkv, o), v = nn::v_of(c.qkv, o);
  if (c.q_pre.data != nullptr)
    nn::parallel_rows(t, hd, [&](int64_t t0, int64_t t1) {
      for (int64_t i = t0; i < t1; ++i) std::memcpy(c.q_pre.ptr(i), c.qkv.ptr(i), sizeof(float) * hd);
    });
  if (o.gate != GateMode::kNone) nn::gate_forward(c, x, p, o, false);
  if (o.rope_theta > 0) {
    rope_forward(q, batch.positions, {.theta = o.rope_theta});
    rope_forward(k, batch.positions, {.theta = o.rope_theta});
  }
  std::vector<float> zeros;
  const View3 attn = nn::heads_view(c.attn, 0, o.heads, d);
  flash_attention(o.attention(), {.q = q, .k = k, .v = v, .cu_seqlens_q = batch.cu_seqlens,
                                  .cu_seqlens_k = batch.cu_seqlens,
                                  .sink_logits = nn::sink_logits(o, p, zeros), .out = attn,
                                  .lse = c.lse});
  if (o.gate != GateMode::kNone) {
    // gated[t, h·D + e] = sigmoid(g[t, h]) (head-wise) or sigmoid(g[t, h·D + e]) · attn
    const int64_t per = o.gate == GateMode::kHeadwise ? d : 1;
    nn::parallel_each_row(t, hd, [&](int64_t i) {
      const float *gp = c.gate_pre.ptr(i), *a = c.attn.ptr(i);
      float *s = c.gate.ptr(i), *y = c.gated.ptr(i);
      for (int64_t j = 0; j < hg; ++j) s[j] = float(nn::sigmoid(double(gp[j])));
      for (int64_t j = 0; j < hd; ++j) y[j] = s[j / per] * a[j];
    });
  }
  linear_forward(out, nn::o_input(c, o), p.o_proj_weight, p.o_proj_bias);
}

}  // namespace attnkit
