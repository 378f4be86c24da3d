// BERT encoder: embeddings (word + position + token type → LayerNorm → dropout) and L post-LN
// layers (attention block → dropout → residual → LayerNorm → GELU MLP → dropout → residual →
// LayerNorm), forward and backward in reverse order (see bert.hpp for the formulas).
#include <algorithm>

#include "attnkit/core/error.hpp"
#include "attnkit/nn/dropout.hpp"
#include "attnkit/nn/embedding.hpp"
#include "attnkit/nn/feed_forward.hpp"
#include "attnkit/nn/norm.hpp"
#include "bert_activations.hpp"

namespace attnkit {
namespace {

void add_into(View2 y, ConstView2 a, ConstView2 b) {  // y = a + b, same shapes
  for (int64_t t = 0; t < y.shape[0]; ++t) {
    float* yr = y.ptr(t);
    const float *ar = a.ptr(t), *br = b.ptr(t);
    for (int64_t c = 0; c < y.shape[1]; ++c) yr[c] = ar[c] + br[c];
  }
}

void copy_into(View2 y, ConstView2 x) { std::copy_n(x.data, x.shape[0] * x.shape[1], y.data); }

// Fills a's batch vectors from `b` and checks them (the layers check ids and shapes).
void normalise_batch(BertActivations& a, const BertBatch& b, const BertConfig& cfg) {
  const int64_t t = a.tokens;
  a.ids.assign(b.tokens.begin(), b.tokens.end());
  if (b.token_type_ids.empty()) {
    a.types.assign(size_t(t), 0);
  } else {
    check(int64_t(b.token_type_ids.size()) == t, "BertModel: token_type_ids: expected [T] = ", t,
          " entries, got ", b.token_type_ids.size());
    a.types.assign(b.token_type_ids.begin(), b.token_type_ids.end());
  }
  a.cu.assign(b.cu_seqlens.begin(), b.cu_seqlens.end());
  if (a.cu.empty()) a.cu = {0, int32_t(t)};
  check(a.cu.size() >= 2 && a.cu.front() == 0 && a.cu.back() == t,
        "BertModel: cu_seqlens: expected S+1 >= 2 entries from 0 to T = ", t);
  const int64_t segments = int64_t(a.cu.size()) - 1;
  a.positions.assign(size_t(t), 0);
  a.pos.assign(size_t(t), 0);
  for (int64_t s = 0; s < segments; ++s) {
    const int32_t lo = a.cu[size_t(s)], hi = a.cu[size_t(s) + 1];
    check(hi >= lo, "BertModel: cu_seqlens: must be non-decreasing at entry ", s + 1);
    check(hi - lo <= cfg.max_position_embeddings, "BertModel: cu_seqlens: segment ", s, " has ",
          hi - lo, " tokens > max_position_embeddings = ", cfg.max_position_embeddings);
    for (int32_t i = lo; i < hi; ++i) a.positions[size_t(i)] = a.pos[size_t(i)] = i - lo;
  }
  a.seqs.assign(b.sequences.begin(), b.sequences.end());
  if (a.seqs.empty())
    for (int32_t s = 0; s < segments; ++s) a.seqs.push_back(s);
  for (size_t i = 0; i < a.seqs.size(); ++i) {
    const int32_t s = a.seqs[i];
    check(s >= 0 && s < segments && (i == 0 || s > a.seqs[i - 1]), "BertModel: sequences[", i,
          "] = ", s, ": expected ascending segment indices in [0, ", segments, ")");
    check(a.cu[size_t(s) + 1] > a.cu[size_t(s)], "BertModel: sequences[", i, "]: segment ", s,
          " is empty (a sequence needs its [CLS] token)");
  }
  for (size_t i = 0; i < a.types.size(); ++i)
    check(a.types[i] >= 0 && a.types[i] < cfg.type_vocab_size, "BertModel: token_type_ids[", i,
          "] = ", a.types[i], " out of range [0, ", cfg.type_vocab_size, ")");
}

}  // namespace

void BertModel::run_encoder(const BertBatch& batch) {
  const auto& c = config_;
  const int64_t t = int64_t(batch.tokens.size());
  check(t >= 1, "BertModel: batch has no tokens");
  if (!acts_)
    acts_ = std::make_unique<BertActivations>(c, block_options(0), t);
  else if (acts_->tokens != t)
    acts_->resize(t);  // reuses the buffers: T changes with almost every packed or bucketed batch
  BertActivations& a = *acts_;
  a.has_forward = a.has_mlm_loss = a.has_task_loss = false;
  normalise_batch(a, batch, c);
  const float eps = float(c.layer_norm_eps), p = dropout_p();
  const AttentionBlockBatch bb{a.cu, a.positions};
  embedding_forward(a.emb_sum.view(), a.ids, matrix(word_));
  embedding_forward(a.tmp.view(), a.pos, matrix(position_));
  add_into(a.emb_sum.view(), a.emb_sum.view(), a.tmp.view());
  embedding_forward(a.tmp.view(), a.types, matrix(token_type_));
  add_into(a.emb_sum.view(), a.emb_sum.view(), a.tmp.view());
  layer_norm_forward(a.resid[0].view(), a.emb_mean, a.emb_rstd, a.emb_sum.view(),
                     vec(emb_norm_.weight), vec(emb_norm_.bias), eps);
  if (p > 0)
    dropout_forward(a.resid[0].view(), a.resid[0].view(), {p, seed_, bert_detail::kEmbeddingStream});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    BertLayerActivations& y = a.layers[size_t(l)];
    const EncoderLayerIds& ly = layers_[size_t(l)];
    const ConstView2 x = a.resid[size_t(l)].view();
    attention_block_forward(a.tmp.view(), y.block.cache(), x, bb, attention_params(store_, ly.attn), block_options(l));
    if (p > 0) dropout_forward(a.tmp.view(), a.tmp.view(), {p, seed_, bert_detail::attention_stream(l)});
    add_into(y.sum1.view(), x, a.tmp.view());
    layer_norm_forward(y.h.view(), y.mean1, y.rstd1, y.sum1.view(),
                       vec(ly.norm1.weight),
                       vec(ly.norm1.bias), eps);
    feed_forward_forward(a.tmp.view(), {y.pre.view(), y.u.view()}, y.h.view(),
                         feed_forward_params(store_, ly.intermediate, ly.output), c.hidden_act);
    if (p > 0) dropout_forward(a.tmp.view(), a.tmp.view(), {p, seed_, bert_detail::mlp_stream(l)});
    add_into(y.sum2.view(), y.h.view(), a.tmp.view());
    layer_norm_forward(a.resid[size_t(l) + 1].view(), y.mean2, y.rstd2, y.sum2.view(),
                       vec(ly.norm2.weight), vec(ly.norm2.bias), eps);
  }
}

// From a.d_resid = d(sequence output), in reverse:
//   x' = LN₂(sum2), sum2 = h + drop(o), o = W_o·gelu(pre) + b_o, pre = W_i·h + b_i
//   h = LN₁(sum1), sum1 = x + drop(attn(x))
//   x₀ = drop(LN(emb)), emb = word[id] + position[pos] + type[tt]
void BertModel::encoder_backward() {
  const auto& c = config_;
  BertActivations& a = *acts_;
  const float p = dropout_p();
  const AttentionBlockBatch bb{a.cu, a.positions};
  for (int64_t l = c.num_hidden_layers - 1; l >= 0; --l) {
    BertLayerActivations& y = a.layers[size_t(l)];
    const EncoderLayerIds& ly = layers_[size_t(l)];
    // d_sum2 (in d_a) from LN₂; it flows to h directly and through the MLP.
    layer_norm_backward(a.d_a.view(), grad_vec(ly.norm2.weight),
                        grad_vec(ly.norm2.bias), a.d_resid.view(), y.sum2.view(),
                        vec(ly.norm2.weight), y.mean2, y.rstd2);
    copy_into(a.d_h.view(), a.d_a.view());
    if (p > 0) dropout_backward(a.d_a.view(), a.d_a.view(), {p, seed_, bert_detail::mlp_stream(l)});
    feed_forward_backward(a.d_x.view(), feed_forward_grads(store_, ly.intermediate, ly.output),
                          a.d_f.view(), a.d_a.view(), y.h.view(), {y.pre.view(), y.u.view()},
                          feed_forward_params(store_, ly.intermediate, ly.output), c.hidden_act);
    add_into(a.d_h.view(), a.d_h.view(), a.d_x.view());
    // d_sum1 (in d_resid, whose old value is no longer needed) from LN₁.
    layer_norm_backward(a.d_resid.view(), grad_vec(ly.norm1.weight),
                        grad_vec(ly.norm1.bias), a.d_h.view(),
                        y.sum1.view(), vec(ly.norm1.weight), y.mean1,
                        y.rstd1);
    if (p > 0)
      dropout_backward(a.d_a.view(), a.d_resid.view(), {p, seed_, bert_detail::attention_stream(l)});
    else
      copy_into(a.d_a.view(), a.d_resid.view());
    attention_block_backward(a.d_x.view(), attention_grads(store_, ly.attn), y.block.scratch(), a.d_a.view(),
                             a.resid[size_t(l)].view(), y.block.cache(), bb, attention_params(store_, ly.attn),
                             block_options(l));
    add_into(a.d_resid.view(), a.d_resid.view(), a.d_x.view());
  }
  if (p > 0)
    dropout_backward(a.d_resid.view(), a.d_resid.view(), {p, seed_, bert_detail::kEmbeddingStream});
  layer_norm_backward(a.d_x.view(), grad_vec(emb_norm_.weight),
                      grad_vec(emb_norm_.bias), a.d_resid.view(), a.emb_sum.view(),
                      vec(emb_norm_.weight), a.emb_mean, a.emb_rstd);
  embedding_backward(grad_matrix(word_), a.ids, a.d_x.view());
  embedding_backward(grad_matrix(position_), a.pos, a.d_x.view());
  embedding_backward(grad_matrix(token_type_), a.types, a.d_x.view());
}

}  // namespace attnkit
