// DeformableClassifier's token embedding (level maps → tokens, positions, reference points), its
// post-LN deformable encoder and the mean-pool + linear head, forward and backward (formulas in
// models/deformable_classifier.hpp). Backward, from the forward, per layer in reverse:
//   src' = LN₂(sum2), sum2 = h1 + W₂·gelu(pre) + b₂, pre = W₁·h1 + b₁
//   h1 = LN₁(sum1), sum1 = src + attn(q = src + pos, value input = src)
//   → d_src = d_sum1 + d_query + d_input_flatten;  d_pos += Σ_n d_query
#include <algorithm>
#include <utility>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/models/deformable_classifier.hpp"
#include "attnkit/models/encoder_layer.hpp"
#include "attnkit/nn/feed_forward.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/norm.hpp"
#include "deformable_activations.hpp"

namespace attnkit {

using deformable_detail::as3;
using deformable_detail::T2;

namespace {

void linear_fwd(bool ref, View2 y, ConstView2 x, ConstView2 w, std::span<const float> b) {
  (ref ? linear_forward_reference : linear_forward)(y, x, w, b);
}
void linear_bwd(bool ref, View2 d_x, View2 d_w, std::span<float> d_b, ConstView2 d_y, ConstView2 x,
                ConstView2 w) {
  (ref ? linear_backward_reference : linear_backward)(d_x, d_w, d_b, d_y, x, w);
}
void ln_fwd(bool ref, View2 y, std::span<float> mean, std::span<float> rstd, ConstView2 x,
            std::span<const float> w, std::span<const float> b, float eps) {
  (ref ? layer_norm_forward_reference : layer_norm_forward)(y, mean, rstd, x, w, b, eps);
}
void ln_bwd(bool ref, View2 d_x, std::span<float> d_w, std::span<float> d_b, ConstView2 d_y,
            ConstView2 x, std::span<const float> w, std::span<const float> mean,
            std::span<const float> rstd) {
  (ref ? layer_norm_backward_reference : layer_norm_backward)(d_x, d_w, d_b, d_y, x, w, mean, rstd, {});
}

// y[r, :] = a[r, :] + b[r % period, :] (b has `period` rows; period = rows: plain sum).
void add_rows(T2& y, const T2& a, const T2& b) {
  const int64_t rows = y.shape()[0], cols = y.shape()[1], period = b.shape()[0];
  parallel_for(rows / period, [&](int64_t blk) {
    for (int64_t r = blk * period; r < (blk + 1) * period; ++r) {
      float* yr = y.data() + r * cols;
      const float* ar = a.data() + r * cols;
      const float* br = b.data() + (r % period) * cols;
      for (int64_t c = 0; c < cols; ++c) yr[c] = ar[c] + br[c];
    }
  });
}
void add_into(T2& y, const T2& a) { add_rows(y, y, a); }

}  // namespace

MsDeformAttnBlockOptions DeformableClassifier::block_options() const {
  return {.d_model = config_.d_model, .heads = config_.heads, .levels = config_.levels(),
          .points = config_.points, .reference = reference_};
}

MsDeformAttnBlockParams DeformableClassifier::block_params(int64_t k) const {
  const EncoderLayerIds& y = layers_[size_t(k)];
  auto m = [&](const LayerIds& t) { return matrix(t.weight); };
  auto v = [&](const LayerIds& t) { return vec(t.bias); };
  return {m(y.value_proj),        v(y.value_proj),        m(y.sampling_offsets), v(y.sampling_offsets),
          m(y.attention_weights), v(y.attention_weights), m(y.output_proj),      v(y.output_proj)};
}

MsDeformAttnBlockGrads DeformableClassifier::block_grads(int64_t k) {
  const EncoderLayerIds& y = layers_[size_t(k)];
  auto m = [&](const LayerIds& t) { return grad_matrix(t.weight); };
  auto v = [&](const LayerIds& t) { return grad_vec(t.bias); };
  return {m(y.value_proj),        v(y.value_proj),        m(y.sampling_offsets), v(y.sampling_offsets),
          m(y.attention_weights), v(y.attention_weights), m(y.output_proj),      v(y.output_proj)};
}


MsDeformAttnBlockInputs DeformableClassifier::block_inputs(int64_t k) const {
  const DeformableActivations& a = *acts_;
  return {.query = as3(a.layers[size_t(k)].query, a.n),
          .reference_points = a.ref.view(),
          .input_flatten = as3(a.src[size_t(k)], a.n),
          .spatial_shapes = spatial_shapes_,
          .level_start_index = level_start_,
          .padding_mask = {}};
}

void DeformableClassifier::encoder_forward() {
  tokens_forward();
  for (int64_t k = 0; k < config_.layers; ++k) layer_forward(k);
  head_forward();
}

void DeformableClassifier::encoder_backward(ConstView2 d_logits) {
  head_backward(d_logits);
  std::fill_n(acts_->d_pos.data(), acts_->d_pos.numel(), 0.0f);
  for (int64_t k = config_.layers - 1; k >= 0; --k) layer_backward(k);
  tokens_backward();
}

// src₀[n, start_l + p] = input_proj.l(pixel p of level l); pos = sine + level_embed; ref.
void DeformableClassifier::tokens_forward() {
  DeformableActivations& a = *acts_;
  const int64_t n = a.n, t = a.tokens, C = config_.d_model, Lv = config_.levels();
  const std::span<const float> level_embed = param(level_embed_);
  const View<float, 4> ref = a.ref.view();
  for (int64_t l = 0; l < Lv; ++l) {
    const DeformableStage& s = a.stages[size_t(l + 1)];
    const int64_t hw = s.size * s.size, w = s.channels, start = level_start_[size_t(l)];
    T2& tok = a.tok[size_t(l)];
    parallel_for(n, [&](int64_t i) {  // NCHW → [pixels, channels]
      for (int64_t ch = 0; ch < w; ++ch) {
        const float* plane = s.act.data() + (i * w + ch) * hw;
        for (int64_t q = 0; q < hw; ++q) tok.data()[(i * hw + q) * w + ch] = plane[q];
      }
    });
    const LayerIds& proj = input_proj_[size_t(l)];
    linear_fwd(reference_, a.proj[size_t(l)].view(), tok.view(), matrix(proj.weight),
               param(proj.bias));
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(a.proj[size_t(l)].data() + i * hw * C, hw * C,
                  a.src[0].data() + (i * t + start) * C);
    for (int64_t q = 0; q < hw; ++q) {
      const int64_t tt = start + q;
      for (int64_t ch = 0; ch < C; ++ch)
        a.pos.data()[tt * C + ch] = sine_[size_t(tt * C + ch)] + level_embed[size_t(l * C + ch)];
      const float rx = float((double(q % s.size) + 0.5) / double(s.size));
      const float ry = float((double(q / s.size) + 0.5) / double(s.size));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t lv = 0; lv < Lv; ++lv) ref(i, tt, lv, 0) = rx, ref(i, tt, lv, 1) = ry;
    }
  }
}

// src[k+1] = LN₂(h1 + linear2(gelu(linear1(h1)))), h1 = LN₁(src[k] + MSDeformAttn(src[k] + pos)).
void DeformableClassifier::layer_forward(int64_t k) {
  DeformableActivations& a = *acts_;
  DeformableLayer& y = a.layers[size_t(k)];
  const EncoderLayerIds& ly = layers_[size_t(k)];
  const float eps = float(config_.layer_norm_eps);
  add_rows(y.query, a.src[size_t(k)], a.pos);
  ms_deform_attn_block_forward(as3(a.tmp, a.n), y.attn, block_inputs(k), block_params(k),
                               block_options());
  add_rows(y.sum1, a.src[size_t(k)], a.tmp);
  ln_fwd(reference_, y.h1.view(), y.mean1, y.rstd1, y.sum1.view(), param(ly.norm1.weight),
         param(ly.norm1.bias), eps);
  (reference_ ? feed_forward_forward_reference : feed_forward_forward)(
      a.tmp.view(), {y.pre.view(), y.u.view()}, y.h1.view(),
      feed_forward_params(store_, ly.linear1, ly.linear2), GeluApproximation::kNone);
  add_rows(y.sum2, y.h1, a.tmp);
  ln_fwd(reference_, a.src[size_t(k) + 1].view(), y.mean2, y.rstd2, y.sum2.view(),
         param(ly.norm2.weight), param(ly.norm2.bias), eps);
}

// logits = classifier(mean over tokens of src[L]) (sums in double).
void DeformableClassifier::head_forward() {
  DeformableActivations& a = *acts_;
  const int64_t t = a.tokens, C = config_.d_model;
  const T2& out = a.src.back();
  parallel_for(a.n, [&](int64_t i) {
    for (int64_t ch = 0; ch < C; ++ch) {
      double sum = 0;
      for (int64_t q = 0; q < t; ++q) sum += out.data()[(i * t + q) * C + ch];
      a.pooled.data()[i * C + ch] = float(sum / double(t));
    }
  });
  linear_fwd(reference_, a.logits.view(), a.pooled.view(), matrix(classifier_.weight),
             param(classifier_.bias));
}

// d_pooled = d_logits·W; every token of image i gets d_pooled[i] / T (into d_src).
void DeformableClassifier::head_backward(ConstView2 d_logits) {
  DeformableActivations& a = *acts_;
  const int64_t t = a.tokens, C = config_.d_model;
  linear_bwd(reference_, a.d_pooled.view(), grad_matrix(classifier_.weight),
             grad_vec(classifier_.bias), d_logits, a.pooled.view(), matrix(classifier_.weight));
  parallel_for(a.n, [&](int64_t i) {
    for (int64_t q = 0; q < t; ++q)
      for (int64_t ch = 0; ch < C; ++ch)
        a.d_src.data()[(i * t + q) * C + ch] = a.d_pooled.data()[i * C + ch] / float(t);
  });
}

// d_src: d(src[k+1]) in, d(src[k]) out; d_pos += Σ_n d_query.
void DeformableClassifier::layer_backward(int64_t k) {
  DeformableActivations& a = *acts_;
  DeformableLayer& y = a.layers[size_t(k)];
  const EncoderLayerIds& ly = layers_[size_t(k)];
  const int64_t n = a.n, t = a.tokens, C = config_.d_model;
  // d_sum2 (in d_a) from LN₂; it reaches h1 directly and through the FFN.
  ln_bwd(reference_, a.d_a.view(), grad_vec(ly.norm2.weight), grad_vec(ly.norm2.bias),
         a.d_src.view(), y.sum2.view(), param(ly.norm2.weight), y.mean2, y.rstd2);
  std::copy_n(a.d_a.data(), a.d_a.numel(), a.d_h.data());
  (reference_ ? feed_forward_backward_reference : feed_forward_backward)(
      a.d_x.view(), feed_forward_grads(store_, ly.linear1, ly.linear2), a.d_f.view(),
      a.d_a.view(), y.h1.view(), {y.pre.view(), y.u.view()},
      feed_forward_params(store_, ly.linear1, ly.linear2), GeluApproximation::kNone);
  add_into(a.d_h, a.d_x);
  // d_sum1 (in d_src, whose old value is no longer needed) from LN₁: the residual's gradient.
  ln_bwd(reference_, a.d_src.view(), grad_vec(ly.norm1.weight), grad_vec(ly.norm1.bias),
         a.d_h.view(), y.sum1.view(), param(ly.norm1.weight), y.mean1, y.rstd1);
  ms_deform_attn_block_backward(as3(a.d_a, n), as3(a.d_x, n), View<float, 4>{}, block_grads(k),
                                as3(std::as_const(a.d_src), n), block_inputs(k), y.attn,
                                block_params(k), block_options());
  add_into(a.d_src, a.d_a);  // query = src + pos
  add_into(a.d_src, a.d_x);  // value input = src
  parallel_for(t, [&](int64_t q) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < C; ++ch)
        a.d_pos.data()[q * C + ch] += a.d_a.data()[(i * t + q) * C + ch];
  });
}

// level_embed collects d_pos over its level's tokens; d_src₀ goes back through input_proj to
// the level maps' d_act (assigned; the stem's is zeroed).
void DeformableClassifier::tokens_backward() {
  DeformableActivations& a = *acts_;
  const int64_t n = a.n, t = a.tokens, C = config_.d_model, Lv = config_.levels();
  const std::span<float> g_level = grad_vec(level_embed_);
  std::fill_n(a.stages[0].d_act.data(), a.stages[0].d_act.numel(), 0.0f);
  for (int64_t l = 0; l < Lv; ++l) {
    DeformableStage& s = a.stages[size_t(l + 1)];
    const int64_t hw = s.size * s.size, w = s.channels, start = level_start_[size_t(l)];
    for (int64_t ch = 0; ch < C; ++ch) {
      double sum = 0;
      for (int64_t q = start; q < start + hw; ++q) sum += a.d_pos.data()[q * C + ch];
      g_level[size_t(l * C + ch)] += float(sum);
    }
    T2& d_proj = a.proj[size_t(l)];  // the forward's projection is no longer needed
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(a.d_src.data() + (i * t + start) * C, hw * C, d_proj.data() + i * hw * C);
    const LayerIds& proj = input_proj_[size_t(l)];
    T2& d_tok = a.d_tok[size_t(l)];
    linear_bwd(reference_, d_tok.view(), grad_matrix(proj.weight), grad_vec(proj.bias),
               d_proj.view(), a.tok[size_t(l)].view(), matrix(proj.weight));
    parallel_for(n, [&](int64_t i) {  // [pixels, channels] → NCHW
      for (int64_t ch = 0; ch < w; ++ch) {
        float* plane = s.d_act.data() + (i * w + ch) * hw;
        for (int64_t q = 0; q < hw; ++q) plane[q] = d_tok.data()[(i * hw + q) * w + ch];
      }
    });
  }
}

}  // namespace attnkit
