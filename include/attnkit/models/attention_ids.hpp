#pragma once
// The tensors of one attention block (nn/attention_block.hpp) inside a model's ParameterStore,
// resolved once from their Hugging Face names, and the block's weight and gradient views built
// from them with no look-up. GPT, BERT and ViT lay out q, k and v consecutively, so the three
// projections are one fused [(H + 2·Hkv)·D, C] matrix (and one fused bias).
#include <cstdint>
#include <string>

#include "attnkit/models/parameter_store.hpp"
#include "attnkit/nn/attention_block.hpp"

namespace attnkit {

struct AttentionIds {
  TensorId qkv_weight, qkv_bias;  // the q tensors; k and v follow them in the layout
  int64_t qkv_rows = 0;           // (H + 2·Hkv)·D
  LayerIds o_proj, gate_proj;     // gate absent without an output gate
  TensorId sinks;                 // [H] sink logits; absent without them
};

// Hugging Face BERT / ViT self-attention layout: prefix.{query,key,value}.weight [C, C] (one fused
// [3C, C]), then, with `bias`, prefix.{query,key,value}.bias [C] (one fused [3C]).
void add_encoder_qkv(ParameterStore& store, const std::string& prefix, int64_t c, bool bias);
// The ids of such a block: q/k/v under qkv_prefix, the output projection o_prefix.{weight,bias}.
AttentionIds encoder_attention_ids(const ParameterStore& store, const std::string& qkv_prefix,
                                   const std::string& o_prefix, int64_t c);

// The block's weights / gradients (views into `store`; absent tensors give empty views).
AttentionBlockParams attention_params(const ParameterStore& store, const AttentionIds& ids);
AttentionBlockGrads attention_grads(ParameterStore& store, const AttentionIds& ids);

}  // namespace attnkit
