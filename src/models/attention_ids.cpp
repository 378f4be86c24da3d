// Attention block weight and gradient views from resolved tensor ids (models/attention_ids.hpp).
#include "attnkit/models/attention_ids.hpp"

namespace attnkit {
namespace {

// Fills the weight views (Block = AttentionBlockParams) or the gradient views (AttentionBlockGrads,
// same fields) through matrix(id, rows) and vec(id, rows).
template <class Block, class Matrix, class Vec>
Block views(const AttentionIds& ids, Matrix matrix, Vec vec) {
  Block b;
  b.qkv_proj_weight = matrix(ids.qkv_weight, ids.qkv_rows);
  b.qkv_proj_bias = vec(ids.qkv_bias, ids.qkv_rows);
  b.o_proj_weight = matrix(ids.o_proj.weight, 0);
  b.o_proj_bias = vec(ids.o_proj.bias, 0);
  b.sinks = vec(ids.sinks, 0);
  b.gate_proj_weight = matrix(ids.gate_proj.weight, 0);
  b.gate_proj_bias = vec(ids.gate_proj.bias, 0);
  return b;
}

}  // namespace

void add_encoder_qkv(ParameterStore& store, const std::string& prefix, int64_t c, bool bias) {
  for (const char* p : {".query", ".key", ".value"}) store.add(prefix + p + ".weight", {c, c});
  if (bias)
    for (const char* p : {".query", ".key", ".value"}) store.add(prefix + p + ".bias", {c});
}

AttentionIds encoder_attention_ids(const ParameterStore& store, const std::string& qkv_prefix,
                                   const std::string& o_prefix, int64_t c) {
  return {.qkv_weight = store.id(qkv_prefix + ".query.weight"),
          .qkv_bias = store.find(qkv_prefix + ".query.bias"),
          .qkv_rows = 3 * c,
          .o_proj = store.layer(o_prefix)};
}

AttentionBlockParams attention_params(const ParameterStore& s, const AttentionIds& ids) {
  return views<AttentionBlockParams>(
      ids, [&](TensorId t, int64_t rows) { return s.matrix(t, rows); },
      [&](TensorId t, int64_t rows) { return s.vec(t, rows); });
}

AttentionBlockGrads attention_grads(ParameterStore& s, const AttentionIds& ids) {
  return views<AttentionBlockGrads>(
      ids, [&](TensorId t, int64_t rows) { return s.grad_matrix(t, rows); },
      [&](TensorId t, int64_t rows) { return s.grad_vec(t, rows); });
}

}  // namespace attnkit
