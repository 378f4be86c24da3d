// ViT forward and backward (formulas in include/attnkit/models/vit.hpp): patch embedding →
// [CLS] + positions → L pre-LN layers → final LayerNorm → pooling → classifier, then the
// backwards in reverse order. Every linear layer runs once over all N·S tokens of the batch.
#include <algorithm>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/dropout.hpp"
#include "attnkit/nn/feed_forward.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/norm.hpp"
#include "vit_activations.hpp"

namespace attnkit {
namespace {

// body(r0, r1) over [0, n) in fixed blocks of rows (each row is written by one block).
void for_row_blocks(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  constexpr int64_t kRows = 64;
  parallel_for((n + kRows - 1) / kRows,
               [&](int64_t b) { body(b * kRows, std::min(n, (b + 1) * kRows)); });
}

// y += x, both [T, C] contiguous.
void add_inplace(View2 y, ConstView2 x) {
  const int64_t c = y.shape[1];
  for_row_blocks(y.shape[0], [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* yr = y.ptr(r);
      const float* xr = x.ptr(r);
      for (int64_t j = 0; j < c; ++j) yr[j] += xr[j];
    }
  });
}

// The rows of a [N·S, C] token matrix that hold each image's [CLS] token: [N, C], row stride S·C.
template <class T>
View<T, 2> cls_rows(View<T, 2> tokens, int64_t images, int64_t s) {
  return {tokens.data, {images, tokens.shape[1]}, {s * tokens.stride[0], 1}};
}

}  // namespace

ConstView2 VitModel::forward(ConstView4 x) {
  const ImageShape in = input_shape();
  check(x.shape[0] >= 1 && x.shape[1] == in.channels && x.shape[2] == in.height &&
            x.shape[3] == in.width,
        "VitModel.forward: x: expected [N, C, H, W] = [N >= 1, ", in.channels, ", ", in.height,
        ", ", in.width, "], got [", x.shape[0], ", ", x.shape[1], ", ", x.shape[2], ", ",
        x.shape[3], "]");
  check(x.data != nullptr, "VitModel.forward: x: null data");
  if (!acts_ || acts_->images != x.shape[0]) {
    acts_.reset();  // free the old buffers before allocating the new ones
    acts_ = std::make_unique<VitActivations>(config_, x.shape[0]);
  }
  acts_->has_forward = false;
  embed(x);
  encoder_forward();
  head_forward();
  acts_->has_forward = true;
  return acts_->logits.view();
}

// patches[n·Np + gy·gw + gx, (ci·P + u)·P + v] = x[n, ci, gy·P + u, gx·P + v] (the conv weight's
// [C, Cin, P, P] order), e = patches·W_pᵀ + b_p, x₀ = drop([cls; e_n] + pos).
void VitModel::embed(ConstView4 x) {
  const VitConfig& c = config_;
  VitActivations& a = *acts_;
  const int64_t n_img = a.images, np = c.num_patches(), gw = c.grid_w(), P = c.patch_size;
  const int64_t cin = c.num_channels, s = c.seq_len(), C = c.hidden_size;
  View2 patches = a.patches.view();
  for_row_blocks(n_img * np, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / np, gy = (r % np) / gw, gx = r % gw;
      float* dst = patches.ptr(r);
      for (int64_t ci = 0; ci < cin; ++ci)
        for (int64_t u = 0; u < P; ++u) {
          const float* src = &x(n, ci, gy * P + u, gx * P);
          for (int64_t v = 0; v < P; ++v) dst[(ci * P + u) * P + v] = src[v * x.stride[3]];
        }
    }
  });
  linear_forward(a.emb.view(), a.patches.view(),
                 matrix(patch_.weight),
                 vec(patch_.bias));
  const float* cls = vec(cls_).data();
  const float* pos = vec(position_).data();
  View2 x0 = a.resid[0].view();
  for_row_blocks(n_img * s, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / s, j = r % s;
      const float* src = j == 0 ? cls : a.emb.view().ptr(n * np + j - 1);
      float* dst = x0.ptr(r);
      for (int64_t k = 0; k < C; ++k) dst[k] = src[k] + pos[j * C + k];
    }
  });
  const float p = dropout_p();
  if (p > 0) dropout_forward(x0, x0, {p, seed_, vit_detail::kEmbeddingStream});
}

void VitModel::encoder_forward() {
  const VitConfig& c = config_;
  VitActivations& a = *acts_;
  const float eps = float(c.layer_norm_eps), p = dropout_p();
  const AttentionBlockBatch bb{a.cu, {}};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    VitLayerActivations& y = a.layers[size_t(l)];
    const EncoderLayerIds& ly = layers_[size_t(l)];
    const ConstView2 x = a.resid[size_t(l)].view();
    layer_norm_forward(y.h1.view(), y.mean1, y.rstd1, x, vec(ly.norm1.weight),
                       vec(ly.norm1.bias), eps);
    // mid = x + drop(attn(h1)), formed in place in mid.
    attention_block_forward(y.mid.view(), y.cache(), y.h1.view(), bb, attention_params(store_, ly.attn),
                            block_options(l));
    if (p > 0) dropout_forward(y.mid.view(), y.mid.view(), {p, seed_, vit_detail::attention_stream(l)});
    add_inplace(y.mid.view(), x);
    layer_norm_forward(y.h2.view(), y.mean2, y.rstd2, y.mid.view(),
                       vec(ly.norm2.weight), vec(ly.norm2.bias),
                       eps);
    // x' = mid + drop(W₂·gelu(W₁·h2 + b₁) + b₂), formed in place in the next residual.
    const View2 next = a.resid[size_t(l) + 1].view();
    feed_forward_forward(next, {y.pre.view(), y.u.view()}, y.h2.view(),
                         feed_forward_params(store_, ly.intermediate, ly.output), c.hidden_act);
    if (p > 0) dropout_forward(next, next, {p, seed_, vit_detail::mlp_stream(l)});
    add_inplace(next, y.mid.view());
  }
}

void VitModel::head_forward() {
  const VitConfig& c = config_;
  VitActivations& a = *acts_;
  const int64_t n_img = a.images, s = c.seq_len(), np = c.num_patches(), C = c.hidden_size;
  const ConstView2 last = a.resid.back().view();
  const auto w = vec(final_norm_.weight), b = vec(final_norm_.bias);
  const float eps = float(c.layer_norm_eps);
  if (c.pooling == VitPooling::kCls) {  // only the [CLS] rows reach the classifier
    layer_norm_forward(a.final_out.view(), a.final_mean, a.final_rstd, cls_rows(last, n_img, s), w,
                       b, eps);
    std::copy_n(a.final_out.data(), n_img * C, a.pooled.data());
  } else {
    layer_norm_forward(a.final_out.view(), a.final_mean, a.final_rstd, last, w, b, eps);
    parallel_for(n_img, [&](int64_t n) {
      float* dst = a.pooled.view().ptr(n);
      std::fill_n(dst, C, 0.0f);
      for (int64_t j = 1; j < s; ++j) {
        const float* src = a.final_out.view().ptr(n * s + j);
        for (int64_t k = 0; k < C; ++k) dst[k] += src[k];
      }
      for (int64_t k = 0; k < C; ++k) dst[k] /= float(np);
    });
  }
  linear_forward(a.logits.view(), a.pooled.view(), matrix(classifier_.weight),
                 vec(classifier_.bias));
}

void VitModel::backward(ConstView2 d_logits) {
  check(acts_ && acts_->has_forward, "VitModel.backward: call forward() first");
  check(d_logits.shape[0] == acts_->images && d_logits.shape[1] == config_.num_labels,
        "VitModel.backward: d_logits: expected [N, K] = [", acts_->images, ", ",
        config_.num_labels, "], got [", d_logits.shape[0], ", ", d_logits.shape[1], "]");
  head_backward(d_logits);
  encoder_backward();
  embed_backward();
}

// logits = pooled·W_cᵀ + b_c; pooled = y[CLS] or mean of the patch rows; y = LN(x_L).
// Leaves d(x_L) in d_resid.
void VitModel::head_backward(ConstView2 d_logits) {
  const VitConfig& c = config_;
  VitActivations& a = *acts_;
  const int64_t n_img = a.images, s = c.seq_len(), np = c.num_patches(), C = c.hidden_size;
  linear_backward(a.d_pooled.view(), grad_matrix(classifier_.weight), grad_vec(classifier_.bias),
                  d_logits, a.pooled.view(), matrix(classifier_.weight));
  const auto w = vec(final_norm_.weight);
  const auto gw = grad_vec(final_norm_.weight), gb = grad_vec(final_norm_.bias);
  View2 d_last = a.d_resid.view();
  if (c.pooling == VitPooling::kCls) {
    std::fill_n(a.d_resid.data(), a.d_resid.numel(), 0.0f);  // patch rows get no gradient here
    layer_norm_backward(cls_rows(d_last, n_img, s), gw, gb, a.d_pooled.view(),
                        cls_rows(ConstView2(a.resid.back().view()), n_img, s), w, a.final_mean,
                        a.final_rstd);
    return;
  }
  View2 d_final = a.d_final.view();
  const float inv = 1.0f / float(np);
  parallel_for(n_img, [&](int64_t n) {
    const float* g = a.d_pooled.view().ptr(n);
    std::fill_n(d_final.ptr(n * s), C, 0.0f);  // [CLS] is not pooled
    for (int64_t j = 1; j < s; ++j) {
      float* dst = d_final.ptr(n * s + j);
      for (int64_t k = 0; k < C; ++k) dst[k] = g[k] * inv;
    }
  });
  layer_norm_backward(d_last, gw, gb, d_final, a.resid.back().view(), w, a.final_mean,
                      a.final_rstd);
}

// From d_resid = d(x_{l+1}), in reverse per layer:
//   x_{l+1} = mid + drop(o), o = W₂·gelu(pre) + b₂, pre = W₁·h2 + b₁, h2 = LN_after(mid)
//   mid = x + drop(attn(h1)), h1 = LN_before(x)
void VitModel::encoder_backward() {
  const VitConfig& c = config_;
  VitActivations& a = *acts_;
  const float p = dropout_p();
  const AttentionBlockBatch bb{a.cu, {}};
  const AttentionBlockScratch scratch = a.scratch();
  const View2 d_resid = a.d_resid.view(), d_a = a.d_a.view(), d_h = a.d_h.view();
  for (int64_t l = c.num_hidden_layers - 1; l >= 0; --l) {
    VitLayerActivations& y = a.layers[size_t(l)];
    const EncoderLayerIds& ly = layers_[size_t(l)];
    View2 d_o = d_resid;
    if (p > 0) {
      dropout_backward(d_a, d_resid, {p, seed_, vit_detail::mlp_stream(l)});
      d_o = d_a;
    }
    feed_forward_backward(d_h, feed_forward_grads(store_, ly.intermediate, ly.output),
                          a.d_f.view(), d_o, y.h2.view(), {y.pre.view(), y.u.view()},
                          feed_forward_params(store_, ly.intermediate, ly.output), c.hidden_act);
    // d(mid): the residual path plus the MLP path.
    layer_norm_backward(d_resid, grad_vec(ly.norm2.weight),
                        grad_vec(ly.norm2.bias), d_h, y.mid.view(),
                        vec(ly.norm2.weight), y.mean2, y.rstd2, d_resid);
    View2 d_attn_out = d_resid;
    if (p > 0) {
      dropout_backward(d_a, d_resid, {p, seed_, vit_detail::attention_stream(l)});
      d_attn_out = d_a;
    }
    attention_block_backward(d_h, attention_grads(store_, ly.attn), scratch, d_attn_out, y.h1.view(), y.cache(), bb,
                             attention_params(store_, ly.attn), block_options(l));
    // d(x): the residual path plus the attention path.
    layer_norm_backward(d_resid, grad_vec(ly.norm1.weight),
                        grad_vec(ly.norm1.bias), d_h,
                        a.resid[size_t(l)].view(), vec(ly.norm1.weight),
                        y.mean1, y.rstd1, d_resid);
  }
}

// x₀ = drop([cls; e_n] + pos), e = patches·W_pᵀ + b_p: d_cls += Σ_n d_x₀[n·S],
// d_pos[j] += Σ_n d_x₀[n·S + j], d_e = the patch rows, then the projection's weight gradient.
void VitModel::embed_backward() {
  const VitConfig& c = config_;
  VitActivations& a = *acts_;
  const int64_t n_img = a.images, s = c.seq_len(), np = c.num_patches(), C = c.hidden_size;
  const float p = dropout_p();
  View2 d_x0 = a.d_resid.view();
  if (p > 0) dropout_backward(d_x0, d_x0, {p, seed_, vit_detail::kEmbeddingStream});
  float* d_pos = grad_vec(position_).data();
  float* d_cls = grad_vec(cls_).data();
  parallel_for(s, [&](int64_t j) {  // each position sums its images in order
    std::vector<double> acc(size_t(C), 0.0);
    for (int64_t n = 0; n < n_img; ++n) {
      const float* g = d_x0.ptr(n * s + j);
      for (int64_t k = 0; k < C; ++k) acc[size_t(k)] += double(g[k]);
    }
    for (int64_t k = 0; k < C; ++k) {
      d_pos[j * C + k] += float(acc[size_t(k)]);
      if (j == 0) d_cls[k] += float(acc[size_t(k)]);
    }
  });
  View2 d_e = a.emb.view();  // the forward's e is not needed any more: reuse it for d_e
  for_row_blocks(n_img * np, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      std::copy_n(d_x0.ptr((r / np) * s + 1 + r % np), C, d_e.ptr(r));
  });
  linear_backward({}, grad_matrix(patch_.weight),
                  grad_vec(patch_.bias), d_e,
                  a.patches.view(), matrix(patch_.weight));
}

}  // namespace attnkit
