// BERT heads, forward and backward: pooler (tanh dense on each sequence's [CLS]), masked LM
// (dense → GELU → LayerNorm → decoder tied to the word embeddings + bias, evaluated only at the
// selected positions with the fused cross-entropy), NSP (2-way on the pooled vector), sequence
// classification (dropout → dense on the pooled vector), token classification (dropout → dense on
// every token) and span extraction (start/end logits, a softmax over each sequence's tokens).
// Losses are means, as Hugging Face's heads: MLM over selected positions, NSP and sequence
// classes over sequences, token classes over labelled tokens, span (start + end) / 2.
#include <algorithm>
#include <cmath>

#include "attnkit/core/error.hpp"
#include "attnkit/nn/activation.hpp"
#include "attnkit/nn/cross_entropy.hpp"
#include "attnkit/nn/dropout.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/norm.hpp"
#include "bert_activations.hpp"

namespace attnkit {
namespace {

using Mat = Tensor<float, 2>;

void resize(Mat& m, int64_t rows, int64_t cols) {
  if (m.shape() != std::array<int64_t, 2>{rows, cols}) m = Mat({rows, cols});
}

// Span loss of one logits column over each sequence's tokens: mean_b (lse_b - z[start_b + y_b]).
double span_loss(ConstView2 z, int64_t col, const BertActivations& a, const std::vector<int32_t>& y) {
  double total = 0;
  for (size_t b = 0; b < a.seqs.size(); ++b) {
    const int64_t lo = a.cu[size_t(a.seqs[b])], hi = a.cu[size_t(a.seqs[b]) + 1];
    double m = -INFINITY, s = 0;
    for (int64_t t = lo; t < hi; ++t) m = std::max(m, double(z(t, col)));
    for (int64_t t = lo; t < hi; ++t) s += std::exp(double(z(t, col)) - m);
    total += m + std::log(s) - double(z(lo + y[b], col));
  }
  return total / double(a.seqs.size());
}

// d z[:, col] = (softmax over each sequence - onehot(y_b))·scale; other tokens 0 (assigned).
void span_loss_backward(View2 dz, ConstView2 z, int64_t col, const BertActivations& a,
                        const std::vector<int32_t>& y, double scale) {
  for (int64_t t = 0; t < dz.shape[0]; ++t) dz(t, col) = 0;
  for (size_t b = 0; b < a.seqs.size(); ++b) {
    const int64_t lo = a.cu[size_t(a.seqs[b])], hi = a.cu[size_t(a.seqs[b]) + 1];
    double m = -INFINITY, s = 0;
    for (int64_t t = lo; t < hi; ++t) m = std::max(m, double(z(t, col)));
    for (int64_t t = lo; t < hi; ++t) s += std::exp(double(z(t, col)) - m);
    for (int64_t t = lo; t < hi; ++t)
      dz(t, col) = float((std::exp(double(z(t, col)) - m) / s - (t == lo + y[b] ? 1.0 : 0.0)) * scale);
  }
}

void check_targets(const char* name, std::span<const int32_t> s, int64_t expected, const char* dims) {
  check(s.empty() || int64_t(s.size()) == expected, "BertModel.forward: targets.", name,
        ": expected ", dims, " = ", expected, " entries, got ", s.size());
}

}  // namespace

BertLosses BertModel::forward(const BertBatch& batch, const BertTargets& targets) {
  run_encoder(batch);
  BertLosses losses;
  run_heads(targets, losses);
  acts_->losses = losses;
  acts_->has_forward = true;
  return losses;
}

void BertModel::run_heads(const BertTargets& tg, BertLosses& losses) {
  const auto& c = config_;
  BertActivations& a = *acts_;
  const int64_t t = a.tokens, C = c.hidden_size, nb = int64_t(a.seqs.size());
  const ConstView2 seq = a.resid.back().view();
  const auto arch = c.architecture;
  const float p = dropout_p();
  check_targets("mlm", tg.mlm, t, "[T]");
  check_targets("nsp", tg.nsp, nb, "[B]");
  check(tg.mlm.empty() || c.has_mlm(), "BertModel.forward: targets.mlm given but ",
        bert_architecture_name(arch), " has no MLM head");
  check(tg.nsp.empty() || arch == BertArchitecture::kPreTraining,
        "BertModel.forward: targets.nsp needs BertForPreTraining");
  check(tg.labels.empty() || arch == BertArchitecture::kSequenceClassification ||
            arch == BertArchitecture::kTokenClassification,
        "BertModel.forward: targets.labels need a classification architecture");
  check((tg.start_positions.empty() && tg.end_positions.empty()) ||
            arch == BertArchitecture::kQuestionAnswering,
        "BertModel.forward: span targets need BertForQuestionAnswering");
  check(tg.start_positions.size() == tg.end_positions.size(),
        "BertModel.forward: start_positions and end_positions must both be given");

  if (c.has_pooler()) {  // pooled[b] = tanh(W_p·h[CLS_b] + b_p)
    resize(a.cls, nb, C);
    resize(a.pooled, nb, C);
    for (int64_t b = 0; b < nb; ++b)
      std::copy_n(seq.ptr(a.cu[size_t(a.seqs[size_t(b)])]), C, a.cls.data() + b * C);
    linear_forward(a.pooled.view(), a.cls.view(), matrix(pooler_.weight), vec(pooler_.bias));
    for (int64_t i = 0; i < nb * C; ++i) a.pooled.data()[i] = std::tanh(a.pooled.data()[i]);
  }

  // Task head: logits, then its loss if targets were given.
  a.task_targets.clear();
  switch (arch) {
    case BertArchitecture::kPreTraining:
      resize(a.logits, nb, 2);
      linear_forward(a.logits.view(), a.pooled.view(), matrix(head_.weight),
                     vec(head_.bias));
      a.task_targets.assign(tg.nsp.begin(), tg.nsp.end());
      break;
    case BertArchitecture::kSequenceClassification:
      check_targets("labels", tg.labels, nb, "[B]");
      resize(a.head_in, nb, C);
      dropout_forward(a.head_in.view(), a.pooled.view(), {p, seed_, bert_detail::kHeadStream});
      resize(a.logits, nb, c.num_labels);
      linear_forward(a.logits.view(), a.head_in.view(), matrix(head_.weight), vec(head_.bias));
      a.task_targets.assign(tg.labels.begin(), tg.labels.end());
      break;
    case BertArchitecture::kTokenClassification:
      check_targets("labels", tg.labels, t, "[T]");
      resize(a.head_in, t, C);
      dropout_forward(a.head_in.view(), seq, {p, seed_, bert_detail::kHeadStream});
      resize(a.logits, t, c.num_labels);
      linear_forward(a.logits.view(), a.head_in.view(), matrix(head_.weight), vec(head_.bias));
      a.task_targets.assign(tg.labels.begin(), tg.labels.end());
      break;
    case BertArchitecture::kQuestionAnswering:
      check_targets("start_positions", tg.start_positions, nb, "[B]");
      resize(a.logits, t, 2);
      linear_forward(a.logits.view(), seq, matrix(head_.weight), vec(head_.bias));
      a.starts.assign(tg.start_positions.begin(), tg.start_positions.end());
      a.ends.assign(tg.end_positions.begin(), tg.end_positions.end());
      for (int64_t b = 0; b < int64_t(a.starts.size()); ++b) {
        const int64_t len = a.cu[size_t(a.seqs[size_t(b)]) + 1] - a.cu[size_t(a.seqs[size_t(b)])];
        check(a.starts[size_t(b)] >= 0 && a.starts[size_t(b)] < len && a.ends[size_t(b)] >= 0 &&
                  a.ends[size_t(b)] < len,
              "BertModel.forward: span targets of sequence ", b, " must lie in [0, ", len, ")");
      }
      break;
    case BertArchitecture::kMaskedLM: a.logits = Mat(); break;
  }
  if (arch == BertArchitecture::kQuestionAnswering) {
    if (!a.starts.empty()) {
      losses.task = float(0.5 * (span_loss(a.logits.view(), 0, a, a.starts) +
                                 span_loss(a.logits.view(), 1, a, a.ends)));
      a.has_task_loss = true;
    }
  } else if (!a.task_targets.empty()) {
    const int64_t rows = a.logits.shape()[0];
    a.task_losses.resize(size_t(rows));
    a.task_lse.resize(size_t(rows));
    const float loss = cross_entropy_forward(a.task_losses, a.task_lse, a.logits.view(), a.task_targets);
    (arch == BertArchitecture::kPreTraining ? losses.nsp : losses.task) = loss;
    a.has_task_loss = true;
  }

  // Masked LM at the selected positions only: gather, transform, fused tied decoder + loss.
  a.mlm_rows.clear();
  a.mlm_targets.clear();
  for (int64_t i = 0; i < int64_t(tg.mlm.size()); ++i)
    if (tg.mlm[size_t(i)] >= 0) {
      a.mlm_rows.push_back(int32_t(i));
      a.mlm_targets.push_back(tg.mlm[size_t(i)]);
    }
  const int64_t m = int64_t(a.mlm_rows.size());
  losses.mlm_count = m;
  if (m > 0) {
    resize(a.mlm_in, m, C);
    resize(a.mlm_pre, m, C);
    resize(a.mlm_act, m, C);
    resize(a.mlm_out, m, C);
    a.mlm_mean.resize(size_t(m));
    a.mlm_rstd.resize(size_t(m));
    a.mlm_losses.resize(size_t(m));
    a.mlm_lse.resize(size_t(m));
    for (int64_t r = 0; r < m; ++r) std::copy_n(seq.ptr(a.mlm_rows[size_t(r)]), C, a.mlm_in.data() + r * C);
    linear_forward(a.mlm_pre.view(), a.mlm_in.view(), matrix(mlm_dense_.weight),
                   vec(mlm_dense_.bias));
    gelu_forward(a.mlm_act.view(), a.mlm_pre.view(), c.hidden_act);
    layer_norm_forward(a.mlm_out.view(), a.mlm_mean, a.mlm_rstd, a.mlm_act.view(),
                       vec(mlm_norm_.weight),
                       vec(mlm_norm_.bias), float(c.layer_norm_eps));
    losses.mlm = linear_cross_entropy_forward(a.mlm_losses, a.mlm_lse, a.mlm_out.view(),
                                              matrix(word_),
                                              vec(mlm_bias_), a.mlm_targets);
    a.has_mlm_loss = true;
  }
  losses.total = losses.mlm + losses.nsp + losses.task;
}

void BertModel::backward(float d_loss) {
  check(acts_ && acts_->has_forward && (acts_->has_mlm_loss || acts_->has_task_loss),
        "BertModel.backward: call forward() with targets first");
  heads_backward(d_loss);
  encoder_backward();
}

// Writes d(sequence output) into a.d_resid, adding each head's contribution.
void BertModel::heads_backward(float d_loss) {
  const auto& c = config_;
  BertActivations& a = *acts_;
  const int64_t t = a.tokens, C = c.hidden_size, nb = int64_t(a.seqs.size());
  const ConstView2 seq = a.resid.back().view();
  const auto arch = c.architecture;
  const float p = dropout_p();
  View2 d_seq = a.d_resid.view();
  std::fill_n(d_seq.data, t * C, 0.0f);

  if (a.has_mlm_loss) {
    const int64_t m = int64_t(a.mlm_rows.size());
    Mat d_out({m, C}), d_in({m, C});
    linear_cross_entropy_backward(d_out.view(), grad_matrix(word_),
                                  grad_vec(mlm_bias_), a.mlm_out.view(),
                                  matrix(word_),
                                  vec(mlm_bias_), a.mlm_targets, a.mlm_lse, d_loss);
    layer_norm_backward(d_out.view(), grad_vec(mlm_norm_.weight),
                        grad_vec(mlm_norm_.bias), d_out.view(),
                        a.mlm_act.view(), vec(mlm_norm_.weight),
                        a.mlm_mean, a.mlm_rstd);
    gelu_backward(d_out.view(), d_out.view(), a.mlm_pre.view(), c.hidden_act);
    linear_backward(d_in.view(), grad_matrix(mlm_dense_.weight),
                    grad_vec(mlm_dense_.bias), d_out.view(), a.mlm_in.view(),
                    matrix(mlm_dense_.weight));
    for (int64_t r = 0; r < m; ++r) {
      float* dst = d_seq.ptr(a.mlm_rows[size_t(r)]);
      for (int64_t j = 0; j < C; ++j) dst[j] += d_in.data()[r * C + j];
    }
  }
  if (!a.has_task_loss) return;

  const int64_t rows = a.logits.shape()[0], k = a.logits.shape()[1];
  Mat d_logits({rows, k});
  if (arch == BertArchitecture::kQuestionAnswering) {
    const double scale = double(d_loss) / (2.0 * double(nb));
    span_loss_backward(d_logits.view(), a.logits.view(), 0, a, a.starts, scale);
    span_loss_backward(d_logits.view(), a.logits.view(), 1, a, a.ends, scale);
  } else {
    cross_entropy_backward(d_logits.view(), a.logits.view(), a.task_targets, a.task_lse, d_loss);
  }
  Mat d_pooled;
  switch (arch) {
    case BertArchitecture::kPreTraining:
      d_pooled = Mat({nb, C});
      linear_backward(d_pooled.view(), grad_matrix(head_.weight),
                      grad_vec(head_.bias), d_logits.view(), a.pooled.view(),
                      matrix(head_.weight));
      break;
    case BertArchitecture::kSequenceClassification:
      d_pooled = Mat({nb, C});
      linear_backward(d_pooled.view(), grad_matrix(head_.weight), grad_vec(head_.bias),
                      d_logits.view(), a.head_in.view(), matrix(head_.weight));
      dropout_backward(d_pooled.view(), d_pooled.view(), {p, seed_, bert_detail::kHeadStream});
      break;
    case BertArchitecture::kTokenClassification: {
      Mat d_in({t, C});
      linear_backward(d_in.view(), grad_matrix(head_.weight), grad_vec(head_.bias),
                      d_logits.view(), a.head_in.view(), matrix(head_.weight));
      dropout_backward(d_in.view(), d_in.view(), {p, seed_, bert_detail::kHeadStream});
      for (int64_t i = 0; i < t * C; ++i) d_seq.data[i] += d_in.data()[i];
      break;
    }
    case BertArchitecture::kQuestionAnswering: {
      Mat d_in({t, C});
      linear_backward(d_in.view(), grad_matrix(head_.weight), grad_vec(head_.bias),
                      d_logits.view(), seq, matrix(head_.weight));
      for (int64_t i = 0; i < t * C; ++i) d_seq.data[i] += d_in.data()[i];
      break;
    }
    case BertArchitecture::kMaskedLM: break;
  }
  if (c.has_pooler()) {  // pooled = tanh(pre) → d_pre = d_pooled·(1 - pooled²)
    for (int64_t i = 0; i < nb * C; ++i) {
      const float y = a.pooled.data()[i];
      d_pooled.data()[i] *= 1.0f - y * y;
    }
    Mat d_cls({nb, C});
    linear_backward(d_cls.view(), grad_matrix(pooler_.weight), grad_vec(pooler_.bias),
                    d_pooled.view(), a.cls.view(), matrix(pooler_.weight));
    for (int64_t b = 0; b < nb; ++b) {
      float* dst = d_seq.ptr(a.cu[size_t(a.seqs[size_t(b)])]);
      for (int64_t j = 0; j < C; ++j) dst[j] += d_cls.data()[b * C + j];
    }
  }
}

void BertModel::mlm_logits(View2 out) {
  check(acts_ && acts_->has_forward, "BertModel.mlm_logits: call forward() first");
  check(config_.has_mlm(), "BertModel.mlm_logits: ", bert_architecture_name(config_.architecture),
        " has no MLM head");
  const int64_t t = acts_->tokens, C = config_.hidden_size;
  check(out.shape[0] == t && out.shape[1] == config_.vocab_size, "BertModel.mlm_logits: out: expected [T, V] = [",
        t, ", ", config_.vocab_size, "]");
  Mat pre({t, C}), act({t, C}), y({t, C});
  std::vector<float> mean(static_cast<size_t>(t)), rstd(static_cast<size_t>(t));
  linear_forward(pre.view(), acts_->resid.back().view(), matrix(mlm_dense_.weight),
                 vec(mlm_dense_.bias));
  gelu_forward(act.view(), pre.view(), config_.hidden_act);
  layer_norm_forward(y.view(), mean, rstd, act.view(), vec(mlm_norm_.weight),
                     vec(mlm_norm_.bias), float(config_.layer_norm_eps));
  logits_forward(out, y.view(), matrix(word_), vec(mlm_bias_));
}

}  // namespace attnkit
