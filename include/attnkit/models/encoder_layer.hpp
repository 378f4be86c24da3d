#pragma once
// One Hugging Face encoder layer (BERT, ViT) inside a model's ParameterStore: self-attention
// (prefix + qkv.{query,key,value}, prefix + "attention.output.dense"), two LayerNorms and the MLP
// (prefix + "intermediate.dense" [F, C], prefix + "output.dense" [C, F]). BERT normalises after
// each residual sum (post-LN), ViT before each sublayer (pre-LN); the layout order follows.
// Also the feed-forward block's weight and gradient views from its two linear layers' ids, for
// any model's GELU MLP (BERT, ViT, the deformable encoder's FFN).
#include <cstdint>
#include <string>

#include "attnkit/models/attention_ids.hpp"
#include "attnkit/models/parameter_store.hpp"
#include "attnkit/nn/attention_block.hpp"
#include "attnkit/nn/feed_forward.hpp"

namespace attnkit {

struct EncoderLayerNames {  // a model's names below the layer prefix
  const char* qkv;           // self-attention q/k/v prefix
  const char* norm1;         // LayerNorm of the attention sublayer
  const char* norm2;         // LayerNorm of the MLP sublayer
  bool pre_ln;               // norm1/norm2 precede their sublayer (ViT) or follow its sum (BERT)
};

struct EncoderLayerIds {  // one encoder layer's tensors
  AttentionIds attn;
  LayerIds norm1, norm2, intermediate, output;
};

// Adds layer `prefix`'s tensors (hidden width c, MLP width f) in the model's layout order.
void add_encoder_layer(ParameterStore& store, const std::string& prefix,
                       const EncoderLayerNames& names, int64_t c, int64_t f, bool qkv_bias);
// The ids of layer `prefix`'s tensors (hidden width c), resolved once.
EncoderLayerIds encoder_layer_ids(const ParameterStore& store, const std::string& prefix,
                                  const EncoderLayerNames& names, int64_t c);

// The feed-forward block's weights / gradients (views into `store`) from its layers fc1 (W₁ [F, C],
// b₁ [F]) and fc2 (W₂ [C, F], b₂ [C]); an absent bias gives an empty span.
FeedForwardParams feed_forward_params(const ParameterStore& store, const LayerIds& fc1,
                                      const LayerIds& fc2);
FeedForwardGrads feed_forward_grads(ParameterStore& store, const LayerIds& fc1,
                                    const LayerIds& fc2);

// Bidirectional attention block options of encoder layer `layer` (no RoPE: learned absolute
// positions are added to the embeddings instead; output bias on); attention_dropout > 0 draws the
// probability dropout from a key distinct per layer for one step seed.
AttentionBlockOptions encoder_block_options(int64_t heads, int64_t head_dim, bool qkv_bias,
                                            float attention_dropout, uint64_t seed, int64_t layer);

}  // namespace attnkit
