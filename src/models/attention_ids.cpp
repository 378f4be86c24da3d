// Attention block weight and gradient views from resolved tensor ids (models/attention_ids.hpp).
#include "attnkit/models/attention_ids.hpp"

namespace attnkit {

AttentionBlockParams attention_params(const ParameterStore& store, const AttentionIds& ids) {
  AttentionBlockParams p;
  p.qkv_proj_weight = store.matrix(ids.qkv_weight, ids.qkv_rows);
  p.qkv_proj_bias = store.vec(ids.qkv_bias, ids.qkv_rows);
  p.o_proj_weight = store.matrix(ids.o_proj.weight);
  p.o_proj_bias = store.vec(ids.o_proj.bias);
  p.sinks = store.vec(ids.sinks);
  p.gate_proj_weight = store.matrix(ids.gate_proj.weight);
  p.gate_proj_bias = store.vec(ids.gate_proj.bias);
  return p;
}

AttentionBlockGrads attention_grads(ParameterStore& store, const AttentionIds& ids) {
  AttentionBlockGrads g;
  g.qkv_proj_weight = store.grad_matrix(ids.qkv_weight, ids.qkv_rows);
  g.qkv_proj_bias = store.grad_vec(ids.qkv_bias, ids.qkv_rows);
  g.o_proj_weight = store.grad_matrix(ids.o_proj.weight);
  g.o_proj_bias = store.grad_vec(ids.o_proj.bias);
  g.sinks = store.grad_vec(ids.sinks);
  g.gate_proj_weight = store.grad_matrix(ids.gate_proj.weight);
  g.gate_proj_bias = store.grad_vec(ids.gate_proj.bias);
  return g;
}

}  // namespace attnkit
