// Attention block reference: the same formulas as attention_block.cpp built from the reference
// ops (linear_*_reference, rope_*_reference, attention_reference[_backward]) with the gate and
// its backward written as scalar loops in double. Writes the same cache layout as the fast path.
#include <cstring>
#include <vector>

#include "attention_block_common.hpp"
#include "attnkit/attention/attention_reference.hpp"
#include "attnkit/nn/attention_block.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/rope.hpp"
#include "nn_common.hpp"

namespace attnkit {

void attention_block_forward_reference(View2 out, const AttentionBlockCache& c, ConstView2 x,
                                       const AttentionBlockBatch& batch,
                                       const AttentionBlockParams& p,
                                       const AttentionBlockOptions& o) {
  const char* fn = "attention_block_forward_reference";
  validate_attention_block(fn, o, x, batch, p, c);
  nn::check_matrix(out, fn, "out", "[T, C]", x.shape[0], x.shape[1]);
  const int64_t t = x.shape[0], d = o.head_dim, hd = o.heads * d, hg = o.gate_width();
  linear_forward_reference(c.qkv, x, p.qkv_proj_weight, p.qkv_proj_bias);
  const View3 q = nn::q_of(c.qkv, o), k = nn::k_of(c.qkv, o), v = nn::v_of(c.qkv, o);
  if (c.q_pre.data != nullptr)
    for (int64_t i = 0; i < t; ++i) std::memcpy(c.q_pre.ptr(i), c.qkv.ptr(i), sizeof(float) * hd);
  if (o.gate != GateMode::kNone) nn::gate_forward(c, x, p, o, true);
  if (o.rope_theta > 0) {
    rope_forward_reference(q, batch.positions, {.theta = o.rope_theta});
    rope_forward_reference(k, batch.positions, {.theta = o.rope_theta});
  }
  std::vector<float> zeros;
  attention_reference(o.attention(),
                      {.q = q, .k = k, .v = v, .cu_seqlens_q = batch.cu_seqlens,
                       .cu_seqlens_k = batch.cu_seqlens,
                       .sink_logits = nn::sink_logits(o, p, zeros),
                       .out = nn::heads_view(c.attn, 0, o.heads, d), .lse = c.lse});
  if (o.gate != GateMode::kNone) {
    const int64_t per = o.gate == GateMode::kHeadwise ? d : 1;
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < hg; ++j) c.gate(i, j) = float(nn::sigmoid(double(c.gate_pre(i, j))));
      for (int64_t j = 0; j < hd; ++j)
        c.gated(i, j) = float(nn::sigmoid(double(c.gate_pre(i, j / per))) * double(c.attn(i, j)));
    }
  }
  linear_forward_reference(out, nn::o_input(c, o), p.o_proj_weight, p.o_proj_bias);
}

void attention_block_backward_reference(View2 d_x, const AttentionBlockGrads& g,
                                        const AttentionBlockScratch& s, ConstView2 d_out,
                                        ConstView2 x, const AttentionBlockCache& c,
                                        const AttentionBlockBatch& batch,
                                        const AttentionBlockParams& p,
                                        const AttentionBlockOptions& o) {
  const char* fn = "attention_block_backward_reference";
  validate_attention_block(fn, o, x, batch, p, c);
  nn::validate_attention_block_backward(fn, o, d_x, g, s, d_out, x, p);
  const int64_t t = x.shape[0], ch = x.shape[1], d = o.head_dim;
  linear_backward_reference(s.d_attn, g.o_proj_weight, g.o_proj_bias, d_out, nn::o_input(c, o),
                            p.o_proj_weight);
  if (o.gate != GateMode::kNone) {  // gated = σ(g)·attn
    const bool headwise = o.gate == GateMode::kHeadwise;
    for (int64_t i = 0; i < t; ++i)
      for (int64_t h = 0; h < o.heads; ++h) {
        double acc = 0;
        for (int64_t e = h * d; e < (h + 1) * d; ++e) {
          const double sg = nn::sigmoid(double(c.gate_pre(i, headwise ? h : e)));
          const double prod = double(s.d_attn(i, e)) * double(c.attn(i, e));
          if (!headwise) s.d_gate(i, e) = float(sg * (1 - sg) * prod);
          acc += prod;
          s.d_attn(i, e) = float(sg * double(s.d_attn(i, e)));
        }
        if (headwise) {
          const double sg = nn::sigmoid(double(c.gate_pre(i, h)));
          s.d_gate(i, h) = float(sg * (1 - sg) * acc);
        }
      }
  }
  std::vector<float> zeros, d_sink(o.sink_logits == SinkLogits::kNone ? 0 : size_t(o.heads));
  const View3 d_q = nn::q_of(s.d_qkv, o), d_k = nn::k_of(s.d_qkv, o);
  attention_reference_backward(
      o.attention(),
      {.q = nn::q_of(c.qkv, o), .k = nn::k_of(c.qkv, o), .v = nn::v_of(c.qkv, o),
       .cu_seqlens_q = batch.cu_seqlens, .cu_seqlens_k = batch.cu_seqlens,
       .sink_logits = nn::sink_logits(o, p, zeros), .out = {}, .lse = {}},
      {.d_out = nn::heads_view(ConstView2(s.d_attn), 0, o.heads, d), .d_q = d_q, .d_k = d_k,
       .d_v = nn::v_of(s.d_qkv, o), .d_sink = d_sink});
  if (o.sink_logits == SinkLogits::kLearned && !g.sinks.empty())
    for (int64_t h = 0; h < o.heads; ++h) g.sinks[size_t(h)] += d_sink[size_t(h)];
  if (o.rope_theta > 0) {
    rope_backward_reference(d_q, batch.positions, {.theta = o.rope_theta});
    rope_backward_reference(d_k, batch.positions, {.theta = o.rope_theta});
  }
  const bool gate = o.gate != GateMode::kNone;
  if (gate && o.gate_source == GateSource::kQuery) {  // g_h = q₀_h·W_hᵀ + b_h
    const int64_t w = o.gate == GateMode::kHeadwise ? 1 : d;
    const ConstView2 q0 = nn::gate_query(c, o);
    std::vector<float> tmp(size_t(t * d));
    for (int64_t h = 0; h < o.heads; ++h) {
      linear_backward_reference(View2::contiguous(tmp.data(), {t, d}),
                                nn::rows_of(g.gate_proj_weight, h * w, w),
                                nn::sub(g.gate_proj_bias, h * w, w),
                                nn::columns(ConstView2(s.d_gate), h * w, w),
                                nn::columns(q0, h * d, d),
                                nn::rows_of(p.gate_proj_weight, h * w, w));
      for (int64_t i = 0; i < t; ++i)
        for (int64_t e = 0; e < d; ++e) d_q(i, h, e) += tmp[size_t(i * d + e)];
    }
  }
  linear_backward_reference(d_x, g.qkv_proj_weight, g.qkv_proj_bias, s.d_qkv, x,
                            p.qkv_proj_weight);
  if (gate && o.gate_source == GateSource::kInput) {  // g = x·W_gᵀ + b_g
    std::vector<float> tmp(size_t(t * ch));
    linear_backward_reference(View2::contiguous(tmp.data(), {t, ch}), g.gate_proj_weight,
                              g.gate_proj_bias, s.d_gate, x, p.gate_proj_weight);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < ch; ++j) d_x(i, j) += tmp[size_t(i * ch + j)];
  }
}

}  // namespace attnkit
