#pragma once
// Exact scaled-dot-product attention: options, argument views, validation (the contract is also
// described in docs/architecture.md).
//
// Layout (FlashAttention's varlen API): q [Tq, H, D], k and v [Tk, Hkv, D], out [Tq, H, D],
// lse [H, Tq] (natural log, float32). B sequences are given by cu_seqlens_q / cu_seqlens_k (int32,
// B+1 entries, from 0 to Tq / Tk); empty spans mean one sequence of Tq queries and Tk keys.
// Query head h reads KV head h / G with G = H / Hkv. In a sequence with Lq queries and Lk keys,
// query i sees key j iff  i + Lk - Lq - left <= j <= i + Lk - Lq + right  (-1 = unbounded), so
// causal is (left, right) = (-1, 0), aligned bottom-right.
// ALiBi (FlashAttention's convention): with slopes m, the score of query i and key j becomes
// softcap(scale·q_i·k_j) - m_h·|i + Lk - Lq - j|; the bias is added after the softcap and is
// neither scaled nor capped. Slopes are constants: the backward gives no gradient for them.
// PyTorch: softmax(scale·q·kᵀ + bias + mask, -1) @ v, with sinks adding exp(b_h) to the
// denominator.
#include <cstdint>
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct AttentionOptions {  // what to compute; no pointers
  float scale = 0;         // 0 → 1/sqrt(D)
  int window_left = -1;    // keys before the diagonal that stay visible; -1 = unbounded
  int window_right = -1;   // keys after the diagonal that stay visible; causal = 0
  float softcap = 0;       // scores become c·tanh(s/c); 0 = off
  float dropout_p = 0;     // probability of dropping an attention weight, in [0, 1)
  uint64_t seed = 0;       // dropout RNG key; mask is a function of (seed, seq, head, i, j)

  // Options for a causal mask: (left, right) = (-1, 0).
  static AttentionOptions causal() { return {.window_right = 0}; }
};

struct AttentionArgs {                           // where the data is
  ConstView3 q;                                  // [Tq, H, D]
  ConstView3 k, v;                               // [Tk, Hkv, D], H % Hkv == 0
  std::span<const int32_t> cu_seqlens_q;         // [B+1] or empty (one sequence)
  std::span<const int32_t> cu_seqlens_k;         // [B+1] or empty (one sequence)
  std::span<const float> sink_logits;            // [H] or empty; 0 everywhere = off-by-one softmax
  std::span<const float> alibi_slopes;           // [H] or [B, H] (per sequence), or empty
  View3 out;                                     // [Tq, H, D]; written by the forward
  View2 lse;                                     // [H, Tq] or empty; written by the forward
};

struct AttentionGrads {        // backward: gradient of the loss w.r.t. out in, the rest out
  ConstView3 d_out;            // [Tq, H, D]
  View3 d_q;                   // [Tq, H, D]; assigned
  View3 d_k, d_v;              // [Tk, Hkv, D]; assigned
  std::span<float> d_sink;     // [H] or empty; assigned (only with sink_logits)
};

// Number of sequences described by args (1 when cu_seqlens are empty).
int64_t num_sequences(const AttentionArgs& args);
// Query/key ranges [begin, end) of sequence b (in [0, num_sequences), else attnkit::Error), in
// packed token indices.
struct SeqSpan {
  int64_t q_begin, q_end, k_begin, k_end;
};
SeqSpan sequence_span(const AttentionArgs& args, int64_t b);
// Scale actually used: opts.scale, or 1/sqrt(D) when it is 0.
float effective_scale(const AttentionOptions& opts, int64_t head_dim);

// ALiBi slope of head h in sequence b (slopes [H] are shared by all sequences); 0 without ALiBi.
inline float alibi_slope(const AttentionArgs& a, int64_t b, int64_t h) {
  if (a.alibi_slopes.empty()) return 0.0f;
  const int64_t heads = a.q.shape[1];
  return a.alibi_slopes[size_t(int64_t(a.alibi_slopes.size()) == heads ? h : b * heads + h)];
}

// validate_layout (shapes, strides, cu_seqlens, sinks, ALiBi slopes and options), then that q, k
// and v are finite; throws attnkit::Error naming the argument.
void validate(const AttentionOptions& opts, const AttentionArgs& args);
// validate without the scans of q, k and v for NaN and inf: for kernels that check the values in
// a pass they make anyway and call check_inputs_finite when they find one.
void validate_layout(const AttentionOptions& opts, const AttentionArgs& args);
// check_finite of q, k and v, in that order.
void check_inputs_finite(const AttentionArgs& args);
// Checks the options alone: scale and softcap finite and >= 0, dropout_p in [0, 1), windows >= -1;
// throws attnkit::Error naming the field.
void validate_options(const AttentionOptions& opts);
// Checks sink logits: empty, or `heads` finite entries; throws attnkit::Error.
void validate_sink_logits(std::span<const float> sink_logits, int64_t heads);
// Rejects NaN and ±inf in t (threads split its tokens); the error names `name` and the first
// offending element.
void check_finite(const ConstView3& t, const char* name);
// validate_backward_layout (validate_layout, then the gradient views against args: shapes, sink
// presence), then the scans of q, k, v and d_out for NaN and inf; throws attnkit::Error.
void validate_backward(const AttentionOptions& opts, const AttentionArgs& args,
                       const AttentionGrads& grads);
// validate_backward without the scans for NaN and inf (validate_layout's counterpart).
void validate_backward_layout(const AttentionOptions& opts, const AttentionArgs& args,
                              const AttentionGrads& grads);
// check_finite of q, k, v and d_out, in that order.
void check_backward_inputs_finite(const AttentionArgs& args, const AttentionGrads& grads);

// Visible key range of query i (0-based in its sequence): keys [lo, hi) of Lk, possibly empty.
struct KeyRange {
  int64_t lo, hi;
};
inline KeyRange visible_keys(const AttentionOptions& o, int64_t i, int64_t lq, int64_t lk) {
  const int64_t diag = i + lk - lq;
  int64_t lo = o.window_left < 0 ? 0 : diag - o.window_left;
  int64_t hi = o.window_right < 0 ? lk : diag + o.window_right + 1;
  lo = lo < 0 ? 0 : (lo > lk ? lk : lo);
  hi = hi > lk ? lk : hi;
  return {lo, hi < lo ? lo : hi};
}

}  // namespace attnkit
