// Attention block backward (fast path), derived from the forward in reverse:
//   out = gated·W_oᵀ + b_o         → d_gated = d_out·W_o, d_W_o += d_outᵀ·gated, d_b_o += Σ d_out
//   gated = s ⊙ attn, s = σ(g)      → d_attn = s ⊙ d_gated, d_g = s(1 - s)·(d_gated ⊙ attn)
//                                     (summed over the D channels of a head when head-wise)
//   attn = flash(q, k, v, sinks)    → d_q, d_k, d_v, d_sinks (flash_attention_backward, from lse)
//   q, k = rope(q₀, k₀)             → d_q₀ = R(-a)·d_q, d_k₀ = R(-a)·d_k (in place)
//   g = q₀_h·W_hᵀ + b_h (query)     → d_q₀_h += d_g_h·W_h, d_W_h += d_g_hᵀ·q₀_h, d_b_h += Σ d_g_h
//   qkv = x·W_qkvᵀ + b_qkv          → d_x = d_qkv·W_qkv, d_W_qkv += d_qkvᵀ·x, d_b_qkv += Σ d_qkv
//   g = x·W_gᵀ + b_g (input)        → d_x += d_g·W_g, d_W_g += d_gᵀ·x, d_b_g += Σ d_g
#include <vector>

#include "attention_block_common.hpp"
#include "attnkit/attention/flash_attention.hpp"
#include "attnkit/nn/attention_block.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/rope.hpp"
#include "nn_common.hpp"

namespace attnkit {
namespace {

// d_attn ← s ⊙ d_gated (in place) and d_gate = s(1 - s)·(d_gated ⊙ attn), per head or element.
void gate_backward(const AttentionBlockScratch& s, const AttentionBlockCache& c,
                   const AttentionBlockOptions& o) {
  const int64_t d = o.head_dim, hd = o.heads * d;
  const bool headwise = o.gate == GateMode::kHeadwise;
  nn::parallel_each_row(c.attn.shape[0], hd, [&](int64_t i) {
    const float *a = c.attn.ptr(i), *gate = c.gate.ptr(i);
    float *dy = s.d_attn.ptr(i), *dg = s.d_gate.ptr(i);
    for (int64_t h = 0; h < o.heads; ++h) {
      if (headwise) {
        const float sg = gate[h];
        dg[h] = sg * (1 - sg) * float(nn::dot_double(dy + h * d, a + h * d, d));
        for (int64_t e = h * d; e < (h + 1) * d; ++e) dy[e] *= sg;
      } else {
        for (int64_t e = h * d; e < (h + 1) * d; ++e) {
          const float sg = gate[e];
          dg[e] = sg * (1 - sg) * dy[e] * a[e];
          dy[e] *= sg;
        }
      }
    }
  });
}

// Query-source gate: d_q₀ += d_g·W_g per head (on d_qkv's q columns, after the RoPE backward),
// and the gate's parameter gradients.
void query_gate_backward(const AttentionBlockGrads& g, const AttentionBlockScratch& s,
                         const AttentionBlockCache& c, const AttentionBlockParams& p,
                         const AttentionBlockOptions& o) {
  const int64_t t = c.qkv.shape[0], d = o.head_dim;
  const int64_t w = o.gate == GateMode::kHeadwise ? 1 : d;
  const ConstView2 q = nn::gate_query(c, o);
  for (int64_t h = 0; h < o.heads; ++h) {
    const ConstView2 d_g = nn::columns(ConstView2(s.d_gate), h * w, w);
    const ConstView2 w_h = nn::rows_of(p.gate_proj_weight, h * w, w);
    linear_backward({}, nn::rows_of(g.gate_proj_weight, h * w, w), nn::sub(g.gate_proj_bias, h * w, w),
                    d_g, nn::columns(q, h * d, d), w_h);
    nn::parallel_sgemm(false, false, t, d, w, 1.0f, d_g.data, nn::ld(d_g), w_h.data, nn::ld(w_h),
                       1.0f, s.d_qkv.data + h * d, nn::ld(s.d_qkv));
  }
}

}  // namespace

void attention_block_backward(View2 d_x, const AttentionBlockGrads& g,
                              const AttentionBlockScratch& s, ConstView2 d_out, ConstView2 x,
                              const AttentionBlockCache& c, const AttentionBlockBatch& batch,
                              const AttentionBlockParams& p, const AttentionBlockOptions& o) {
  const char* fn = "attention_block_backward";
  validate_attention_block(fn, o, x, batch, p, c);
  nn::validate_attention_block_backward(fn, o, d_x, g, s, d_out, x, p);
  const int64_t d = o.head_dim;
  linear_backward(s.d_attn, g.o_proj_weight, g.o_proj_bias, d_out, nn::o_input(c, o),
                  p.o_proj_weight);
  if (o.gate != GateMode::kNone) gate_backward(s, c, o);

  std::vector<float> zeros;
  const std::span<float> d_sink =
      s.d_sink.data ? std::span<float>(s.d_sink.data, size_t(o.heads)) : std::span<float>{};
  const View3 d_q = nn::q_of(s.d_qkv, o), d_k = nn::k_of(s.d_qkv, o);
  flash_attention_backward(
      o.attention(),
      {.q = nn::q_of(c.qkv, o), .k = nn::k_of(c.qkv, o), .v = nn::v_of(c.qkv, o),
       .cu_seqlens_q = batch.cu_seqlens, .cu_seqlens_k = batch.cu_seqlens,
       .sink_logits = nn::sink_logits(o, p, zeros), .out = nn::heads_view(c.attn, 0, o.heads, d),
       .lse = c.lse},
      {.d_out = nn::heads_view(ConstView2(s.d_attn), 0, o.heads, d), .d_q = d_q, .d_k = d_k,
       .d_v = nn::v_of(s.d_qkv, o), .d_sink = d_sink});
  if (o.sink_logits == SinkLogits::kLearned && !g.sinks.empty())
    for (int64_t h = 0; h < o.heads; ++h) g.sinks[size_t(h)] += d_sink[size_t(h)];
  if (o.rope_theta > 0) {
    rope_backward(d_q, batch.positions, {.theta = o.rope_theta});
    rope_backward(d_k, batch.positions, {.theta = o.rope_theta});
  }
  const bool gate = o.gate != GateMode::kNone;
  if (gate && o.gate_source == GateSource::kQuery) query_gate_backward(g, s, c, p, o);
  linear_backward(d_x, g.qkv_proj_weight, g.qkv_proj_bias, s.d_qkv, x, p.qkv_proj_weight);
  if (gate && o.gate_source == GateSource::kInput) {
    linear_backward({}, g.gate_proj_weight, g.gate_proj_bias, s.d_gate, x, p.gate_proj_weight);
    const ConstView2 wg = p.gate_proj_weight;
    nn::parallel_sgemm(false, false, x.shape[0], x.shape[1], o.gate_width(), 1.0f, s.d_gate.data,
                       nn::ld(s.d_gate), wg.data, nn::ld(wg), 1.0f, d_x.data, nn::ld(d_x));
  }
}

}  // namespace attnkit
