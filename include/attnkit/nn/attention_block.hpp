#pragma once
// The attention block of a transformer layer (GPT decoder, BERT encoder), forward and backward,
// llm.c style (outputs first, saved activations in a caller-owned cache, no autograd graph).
// x [T, C] is the already-normed hidden state of a packed batch (cu_seqlens [B+1], positions [T]).
//
//   qkv   = x·W_qkvᵀ + b_qkv                      [T, (H + 2·Hkv)·D]; q, k, v are strided views
//   q, k  ← rope(q, k; positions)                 Llama rotate_half, in place (theta 0: no RoPE)
//   attn  = flash_attention(q, k, v)              [T, H, D] (+ lse [H, T]); causal or not, window,
//                                                 sink logits: learned [H] or off-by-one (0)
//   gated = sigmoid(g) ⊙ attn                     g head-wise [T, H] or element-wise [T, H·D]
//   out   = gated·W_oᵀ + b_o                      [T, C]
//
// Gates (Qiu et al. 2025, "Gated Attention for LLMs", the SDPA-output gate):
//   gate_source = kInput: g = x·W_gᵀ + b_g with W_g [Hg, C] (Hg = H head-wise, H·D element-wise),
//     the paper's formulation (the gate is a projection of the block input).
//   gate_source = kQuery: g is computed per head from that head's query q_h [D] BEFORE RoPE:
//     head-wise    g[t, h]    = Σ_d W_g[h, d]·q[t, h, d] + b_g[h]              W_g [H, D]
//     element-wise g[t, h, e] = Σ_d W_g[h·D + e, d]·q[t, h, d] + b_g[h·D + e]  W_g [H·D, D]
//     (W_h = rows h·D..h·D+D-1 is head h's [out, in] matrix). Pre-RoPE so the gate depends on the
//     token's content only, not on its absolute position (which packing and streaming change);
//     with rope_theta = 0 the two coincide.
//   The gate values sigmoid(g) are kept in the cache (`gate`) for statistics.
//
// Parameter names mirror Hugging Face Llama (`self_attn.{q,k,v,o}_proj.{weight,bias}`) and
// gpt-oss (`self_attn.sinks`). q/k/v are stored fused: qkv_proj_weight = concat(q_proj.weight
// [H·D, C], k_proj.weight [Hkv·D, C], v_proj.weight [Hkv·D, C]) along rows (q rows first, then k,
// then v), and the biases likewise. Llama's checkpoints store q/k with HF's rotate_half
// permutation already applied, which is the RoPE convention used here, so rows copy unchanged.
// PyTorch: tests/python/test_attention_block.py writes the whole block in torch.
//
// Gradient contract (docs/architecture.md): attention_block_backward ADDS (+=) into parameter
// gradients and ASSIGNS (=) d_x. An empty gradient view or span is skipped (frozen parameter).
// Reference: attention_block_reference.cpp (linear/rope/attention references, double gating),
// same signatures and cache layout, so whole models can compare reference vs fast.
#include <cstdint>
#include <span>

#include "attnkit/attention/attention.hpp"
#include "attnkit/core/tensor.hpp"

namespace attnkit {

// Sink logits: a per-head logit added to every softmax denominator (gpt-oss's learned "sinks";
// off-by-one: fixed at 0). Not the KV cache's StreamingLLM sink tokens (kv/kv_cache.hpp).
enum class SinkLogits { kNone, kLearned, kOffByOne };
enum class GateMode { kNone, kHeadwise, kElementwise };
enum class GateSource { kInput, kQuery };

struct AttentionBlockOptions {        // what to compute; no pointers
  int64_t heads = 0;                  // H
  int64_t kv_heads = 0;               // Hkv, H % Hkv == 0; 0 → H (multi-head)
  int64_t head_dim = 0;               // D (even when RoPE is on)
  double rope_theta = 10000.0;        // RoPE base; 0 disables RoPE
  bool causal = true;                 // GPT: true; BERT: false. Forces window_right = 0
  int window_left = -1;               // sliding window, keys before the diagonal; -1 = unbounded
  int window_right = -1;              // keys after the diagonal (must be -1 or 0 when causal)
  float scale = 0;                    // 0 → 1/sqrt(D)
  SinkLogits sink_logits = SinkLogits::kNone;
  GateMode gate = GateMode::kNone;
  GateSource gate_source = GateSource::kInput;
  bool gate_bias = true;              // gate projection has a bias b_g [Hg]
  bool qkv_bias = false;              // Llama: false; Qwen2 / GPT-2: true
  bool o_bias = false;
  float dropout_p = 0;                // attention-probability dropout (BERT training); 0 = off
  uint64_t dropout_seed = 0;          // its Philox key (new per step; the backward reuses it)

  int64_t kv() const { return kv_heads == 0 ? heads : kv_heads; }            // Hkv
  int64_t qkv_width() const { return (heads + 2 * kv()) * head_dim; }        // (H + 2·Hkv)·D
  int64_t gate_width() const {                                               // Hg
    return gate == GateMode::kNone ? 0 : gate == GateMode::kHeadwise ? heads : heads * head_dim;
  }
  // The attention kernel's options (window after causal, scale).
  AttentionOptions attention() const;
};

struct AttentionBlockParams {                // views of the caller's weights (Hugging Face names)
  ConstView2 qkv_proj_weight;                // [(H + 2·Hkv)·D, C]: q_proj, k_proj, v_proj rows
  std::span<const float> qkv_proj_bias;      // [(H + 2·Hkv)·D] iff qkv_bias
  ConstView2 o_proj_weight;                  // [C, H·D]
  std::span<const float> o_proj_bias;        // [C] iff o_bias
  std::span<const float> sinks;              // [H] iff sink_logits == kLearned
  ConstView2 gate_proj_weight;               // input: [Hg, C]; query: [H, D] or [H·D, D]
  std::span<const float> gate_proj_bias;     // [Hg] iff gate and gate_bias
};

struct AttentionBlockGrads {                 // same shapes as AttentionBlockParams; += , empty = skip
  View2 qkv_proj_weight;
  std::span<float> qkv_proj_bias;
  View2 o_proj_weight;
  std::span<float> o_proj_bias;
  std::span<float> sinks;
  View2 gate_proj_weight;
  std::span<float> gate_proj_bias;
};

struct AttentionBlockBatch {                 // how the T tokens form sequences
  std::span<const int32_t> cu_seqlens;       // [B+1] from 0 to T, or empty (one sequence)
  std::span<const int64_t> positions;        // [T] position of each token in its sequence (RoPE)
};

struct AttentionBlockCache {                 // written by the forward, read by the backward
  View2 qkv;                                 // [T, (H + 2·Hkv)·D] after RoPE
  View2 attn;                                // [T, H·D] attention output before the gate
  View2 lse;                                 // [H, T] log-sum-exp of each attention row
  View2 gate_pre;                            // [T, Hg] gate pre-activation g (empty: no gate)
  View2 gate;                                // [T, Hg] sigmoid(g), for statistics (empty: no gate)
  View2 gated;                               // [T, H·D] sigmoid(g) ⊙ attn (empty: no gate)
  View2 q_pre;                               // [T, H·D] q before RoPE (only query gate + RoPE)
};

struct AttentionBlockScratch {               // backward temporaries (contents undefined after)
  View2 d_qkv;                               // [T, (H + 2·Hkv)·D]
  View2 d_attn;                              // [T, H·D]
  View2 d_gate;                              // [T, Hg] (empty: no gate)
  View2 d_sink;                              // [1, H] (empty: no sink)
};

// Owning buffers for a cache and a scratch sized for `tokens` tokens under `opts`.
class AttentionBlockWorkspace {
 public:
  AttentionBlockWorkspace(const AttentionBlockOptions& opts, int64_t tokens);
  // Re-sizes every buffer for `tokens` tokens (same options), reusing the allocations while they
  // fit (Tensor::resize): a model whose token count changes per batch allocates only when it grows.
  // Contents are unspecified afterwards.
  void resize(int64_t tokens);
  AttentionBlockCache cache();
  AttentionBlockScratch scratch();

 private:
  Tensor<float, 2> qkv_, attn_, lse_, gate_pre_, gate_, gated_, q_pre_;
  Tensor<float, 2> d_qkv_, d_attn_, d_gate_, d_sink_;
};

// Checks options, x [T, C], batch, parameters and cache shapes; throws attnkit::Error naming the
// argument (fn prefixes the message).
void validate_attention_block(const char* fn, const AttentionBlockOptions& opts, ConstView2 x,
                              const AttentionBlockBatch& batch, const AttentionBlockParams& params,
                              const AttentionBlockCache& cache);

// out[T, C] = the block applied to x[T, C]; fills cache (qkv, attn, lse, gate_pre, gate, gated,
// q_pre as the options require).
void attention_block_forward(View2 out, const AttentionBlockCache& cache, ConstView2 x,
                             const AttentionBlockBatch& batch, const AttentionBlockParams& params,
                             const AttentionBlockOptions& opts);
// d_x[T, C] (assigned) and parameter gradients (+=) from d_out[T, C], the forward's x and cache.
void attention_block_backward(View2 d_x, const AttentionBlockGrads& grads,
                              const AttentionBlockScratch& scratch, ConstView2 d_out, ConstView2 x,
                              const AttentionBlockCache& cache, const AttentionBlockBatch& batch,
                              const AttentionBlockParams& params,
                              const AttentionBlockOptions& opts);

// References with the same contracts (reference linear/rope/attention ops, gating in double).
void attention_block_forward_reference(View2 out, const AttentionBlockCache& cache, ConstView2 x,
                                       const AttentionBlockBatch& batch,
                                       const AttentionBlockParams& params,
                                       const AttentionBlockOptions& opts);
void attention_block_backward_reference(View2 d_x, const AttentionBlockGrads& grads,
                                        const AttentionBlockScratch& scratch, ConstView2 d_out,
                                        ConstView2 x, const AttentionBlockCache& cache,
                                        const AttentionBlockBatch& batch,
                                        const AttentionBlockParams& params,
                                        const AttentionBlockOptions& opts);

}  // namespace attnkit
