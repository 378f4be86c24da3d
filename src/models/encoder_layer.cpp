// Hugging Face encoder layer layout, ids, feed-forward views and attention options
// (models/encoder_layer.hpp).
#include "attnkit/models/encoder_layer.hpp"

namespace attnkit {

void add_encoder_layer(ParameterStore& s, const std::string& prefix, const EncoderLayerNames& n,
                       int64_t c, int64_t f, bool qkv_bias) {
  if (n.pre_ln) s.add_norm(prefix + n.norm1, c);
  add_encoder_qkv(s, prefix + n.qkv, c, qkv_bias);
  s.add_linear(prefix + "attention.output.dense", c, c);
  s.add_norm(prefix + (n.pre_ln ? n.norm2 : n.norm1), c);
  s.add_linear(prefix + "intermediate.dense", f, c);
  s.add_linear(prefix + "output.dense", c, f);
  if (!n.pre_ln) s.add_norm(prefix + n.norm2, c);
}

EncoderLayerIds encoder_layer_ids(const ParameterStore& s, const std::string& prefix,
                                  const EncoderLayerNames& n, int64_t c) {
  return {.attn = encoder_attention_ids(s, prefix + n.qkv, prefix + "attention.output.dense", c),
          .norm1 = s.layer(prefix + n.norm1),
          .norm2 = s.layer(prefix + n.norm2),
          .intermediate = s.layer(prefix + "intermediate.dense"),
          .output = s.layer(prefix + "output.dense")};
}

FeedForwardParams feed_forward_params(const ParameterStore& s, const LayerIds& fc1,
                                      const LayerIds& fc2) {
  return {s.matrix(fc1.weight), s.vec(fc1.bias), s.matrix(fc2.weight), s.vec(fc2.bias)};
}

FeedForwardGrads feed_forward_grads(ParameterStore& s, const LayerIds& fc1, const LayerIds& fc2) {
  return {s.grad_matrix(fc1.weight), s.grad_vec(fc1.bias), s.grad_matrix(fc2.weight),
          s.grad_vec(fc2.bias)};
}

AttentionBlockOptions encoder_block_options(int64_t heads, int64_t head_dim, bool qkv_bias,
                                            float attention_dropout, uint64_t seed, int64_t layer) {
  AttentionBlockOptions o;
  o.heads = o.kv_heads = heads;
  o.head_dim = head_dim;
  o.rope_theta = 0;
  o.causal = false;
  o.qkv_bias = qkv_bias;
  o.o_bias = true;
  if (attention_dropout > 0) {
    o.dropout_p = attention_dropout;
    o.dropout_seed = seed ^ (0x9E3779B97F4A7C15ull * uint64_t(layer + 1));
  }
  return o;
}

}  // namespace attnkit
