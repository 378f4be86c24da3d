// Private to the BERT model: the saved activations of one forward over T tokens (every buffer the
// backward reads) and the dropout stream numbering.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/core/tensor.hpp"
#include "attnkit/models/bert.hpp"

namespace attnkit {

namespace bert_detail {
constexpr uint32_t kEmbeddingStream = 0;                                  // drop(LN(embeddings))
inline uint32_t attention_stream(int64_t l) { return uint32_t(1 + 2 * l); }  // drop(attn out)
inline uint32_t mlp_stream(int64_t l) { return uint32_t(2 + 2 * l); }        // drop(MLP out)
constexpr uint32_t kHeadStream = 0x48454144u;                             // classifier input
}  // namespace bert_detail

struct BertLayerActivations {
  BertLayerActivations(const AttentionBlockOptions& bo, int64_t t, int64_t c, int64_t f)
      : block(bo, t), sum1({t, c}), h({t, c}), pre({t, f}), u({t, f}), sum2({t, c}),
        mean1(size_t(t)), rstd1(size_t(t)), mean2(size_t(t)), rstd2(size_t(t)) {}
  void resize(int64_t t) {  // same widths, t tokens, buffers reused while they fit
    block.resize(t);
    for (Tensor<float, 2>* x : {&sum1, &h, &pre, &u, &sum2}) x->resize({t, x->shape()[1]});
    for (std::vector<float>* v : {&mean1, &rstd1, &mean2, &rstd2}) v->resize(size_t(t));
  }
  AttentionBlockWorkspace block;
  Tensor<float, 2> sum1, h, pre, u, sum2;  // x + drop(a), LN₁, W_i·h + b_i, gelu, h + drop(o)
  std::vector<float> mean1, rstd1, mean2, rstd2;
};

class BertActivations {
 public:
  BertActivations(const BertConfig& cfg, const AttentionBlockOptions& bo, int64_t t) : tokens(t) {
    const int64_t c = cfg.hidden_size, f = cfg.intermediate_size;
    emb_sum = Tensor<float, 2>({t, c});
    emb_mean.resize(size_t(t));
    emb_rstd.resize(size_t(t));
    for (int64_t l = 0; l <= cfg.num_hidden_layers; ++l) resid.emplace_back(std::array<int64_t, 2>{t, c});
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) layers.emplace_back(bo, t, c, f);
    tmp = Tensor<float, 2>({t, c});
    d_resid = Tensor<float, 2>({t, c});
    d_a = Tensor<float, 2>({t, c});
    d_h = Tensor<float, 2>({t, c});
    d_x = Tensor<float, 2>({t, c});
    d_f = Tensor<float, 2>({t, f});
  }
  // Re-sizes every per-token buffer for t tokens. The token count of a training batch changes
  // from step to step (pack: rows × row length; bucket: batch × longest). Reallocating them
  // (~45 KB per token for preset mini, zeroed, i.e. page faults + memset) every step made a
  // packed step slower than a padded one whose T stayed at B × 128; the buffers now keep their
  // capacity (Tensor::resize) and only grow.
  void resize(int64_t t) {
    tokens = t;
    for (Tensor<float, 2>* x : {&emb_sum, &tmp, &d_resid, &d_a, &d_h, &d_x, &d_f}) x->resize({t, x->shape()[1]});
    for (auto& x : resid) x.resize({t, x.shape()[1]});
    for (std::vector<float>* v : {&emb_mean, &emb_rstd}) v->resize(size_t(t));
    for (auto& y : layers) y.resize(t);
  }
  int64_t tokens;
  // The batch, normalised: ids, token types, positions, attention segments, real sequences.
  std::vector<int32_t> ids, types, pos, cu, seqs;
  std::vector<int64_t> positions;
  // Encoder.
  Tensor<float, 2> emb_sum;  // word + position + token type embeddings
  std::vector<float> emb_mean, emb_rstd;
  std::vector<Tensor<float, 2>> resid;  // [L+1] layer inputs; resid[L] is the sequence output
  std::vector<BertLayerActivations> layers;
  Tensor<float, 2> tmp, d_resid, d_a, d_h, d_x, d_f;
  // Heads (sized per forward; small).
  Tensor<float, 2> cls, pooled, head_in, logits;  // [B, C], [B, C], classifier input, task logits
  std::vector<int32_t> task_targets;                // labels / nsp targets as the CE sees them
  std::vector<float> task_losses, task_lse;
  std::vector<int32_t> mlm_rows, mlm_targets;       // selected positions and their targets
  Tensor<float, 2> mlm_in, mlm_pre, mlm_act, mlm_out;  // [M, C] gathered, dense, gelu, LN
  std::vector<float> mlm_mean, mlm_rstd, mlm_losses, mlm_lse;
  std::vector<int32_t> starts, ends;                // span targets [B]
  bool has_mlm_loss = false, has_task_loss = false, has_forward = false;
  BertLosses losses;
};

}  // namespace attnkit
