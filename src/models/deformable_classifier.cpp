// DeformableClassifier: parameter layout, initialisation, the fixed sine embedding, forward and
// backward entry points and the CNN backbone (see models/deformable_classifier.hpp). The token
// embedding, encoder and head are in deformable_encoder.cpp.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/models/deformable_classifier.hpp"
#include "attnkit/nn/batch_norm2d.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "deformable_activations.hpp"

namespace attnkit {

using deformable_detail::T4;

DeformableClassifier::DeformableClassifier(const DeformableConfig& config)
    : ConfiguredImageClassifier("DeformableClassifier", config) {
  validate(config_);
  build_layout();
  // Levels: backbone maps 1..Lv, pixels row-major, concatenated.
  const std::vector<int64_t> sizes = deformable_map_sizes(config_);
  int64_t start = 0;
  for (size_t l = 1; l < sizes.size(); ++l) {
    spatial_shapes_.push_back(sizes[l]);
    spatial_shapes_.push_back(sizes[l]);
    level_start_.push_back(start);
    start += sizes[l] * sizes[l];
  }
  // Deformable DETR's PositionEmbeddingSine(C/2, temperature 10000, normalize=True): channel
  // 2k (2k+1) of each half is sin (cos) of coordinate / 10000^(2k/(C/2)); y half first.
  const int64_t c = config_.d_model, half = c / 2;
  sine_.assign(size_t(start * c), 0.0f);
  for (size_t l = 1; l < sizes.size(); ++l) {
    const int64_t s = sizes[l];
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < s; ++j) {
        float* row = sine_.data() + (level_start_[l - 1] + i * s + j) * c;
        const double coord[2] = {(double(i) + 0.5) / double(s) * 2 * std::numbers::pi,
                                 (double(j) + 0.5) / double(s) * 2 * std::numbers::pi};
        for (int64_t axis = 0; axis < 2; ++axis)
          for (int64_t k = 0; k < half / 2; ++k) {
            const double v = coord[axis] / std::pow(10000.0, double(2 * k) / double(half));
            row[axis * half + 2 * k] = float(std::sin(v));
            row[axis * half + 2 * k + 1] = float(std::cos(v));
          }
      }
  }
}
DeformableClassifier::~DeformableClassifier() = default;

ImageShape DeformableClassifier::input_shape() const {
  return {config_.num_channels, config_.image_size, config_.image_size};
}

void DeformableClassifier::build_layout() {
  const auto& c = config_;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) { store_.add(name, std::move(shape)); };
  auto dense = [&](const std::string& p, int64_t out, int64_t in) { store_.add_linear(p, out, in); };
  for (size_t i = 0; i < c.widths.size(); ++i) {
    const std::string p = "backbone." + std::to_string(i) + ".";
    add(p + "conv.weight", {c.widths[i], i == 0 ? c.num_channels : c.widths[i - 1], 3, 3});
    store_.add_batch_norm(p + "bn", c.widths[i]);
  }
  const int64_t C = c.d_model, Lv = c.levels();
  for (int64_t l = 0; l < Lv; ++l) dense("input_proj." + std::to_string(l), C, c.widths[size_t(l + 1)]);
  add("level_embed", {Lv, C});
  const MsDeformAttnBlockOptions bo = block_options();
  for (int64_t k = 0; k < c.layers; ++k) {
    const std::string p = "encoder.layers." + std::to_string(k) + ".";
    dense(p + "self_attn.value_proj", C, C);
    dense(p + "self_attn.sampling_offsets", bo.offsets_width(), C);
    dense(p + "self_attn.attention_weights", bo.weights_width(), C);
    dense(p + "self_attn.output_proj", C, C);
    store_.add_norm(p + "norm1", C);
    dense(p + "linear1", c.ffn_dim, C);
    dense(p + "linear2", C, c.ffn_dim);
    store_.add_norm(p + "norm2", C);
  }
  dense("classifier", c.num_labels, C);
  store_.allocate();
  const auto& s = store_;
  for (size_t i = 0; i < c.widths.size(); ++i) {
    const std::string p = "backbone." + std::to_string(i) + ".";
    backbone_.push_back({s.id(p + "conv.weight"), s.batch_norm(p + "bn")});
  }
  for (int64_t l = 0; l < Lv; ++l) input_proj_.push_back(s.layer("input_proj." + std::to_string(l)));
  level_embed_ = s.id("level_embed");
  for (int64_t k = 0; k < c.layers; ++k) {
    const std::string p = "encoder.layers." + std::to_string(k) + ".";
    layers_.push_back({s.layer(p + "self_attn.value_proj"), s.layer(p + "self_attn.sampling_offsets"),
                       s.layer(p + "self_attn.attention_weights"), s.layer(p + "self_attn.output_proj"),
                       s.layer(p + "norm1"), s.layer(p + "linear1"), s.layer(p + "linear2"),
                       s.layer(p + "norm2")});
  }
  classifier_ = s.layer("classifier");
}

void DeformableClassifier::init_random(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const MsDeformAttnBlockOptions bo = block_options();
  for (const auto& p : store_.info()) {
    float* x = store_.parameters().data() + p.offset;
    const bool vector = p.shape.size() == 1;
    if (p.name.find(".self_attn.") != std::string::npos) {
      continue;  // below, one block at a time
    } else if (p.shape.size() == 4) {  // kaiming_normal_(mode="fan_out", nonlinearity="relu")
      const double fan_out = double(p.shape[0] * p.shape[2] * p.shape[3]);
      std::normal_distribution<double> normal(0.0, std::sqrt(2.0 / fan_out));
      for (int64_t i = 0; i < p.numel; ++i) x[i] = float(normal(rng));
    } else if (p.name == "level_embed") {  // Deformable DETR: normal_(level_embed)
      std::normal_distribution<double> normal(0.0, 1.0);
      for (int64_t i = 0; i < p.numel; ++i) x[i] = float(normal(rng));
    } else if (vector) {  // norm weights 1; every bias 0
      const bool norm_weight = p.name.ends_with("norm1.weight") || p.name.ends_with("norm2.weight") ||
                               p.name.ends_with("bn.weight");
      std::fill_n(x, p.numel, norm_weight ? 1.0f : 0.0f);
    } else {  // xavier_uniform_
      const double bound = std::sqrt(6.0 / double(p.shape[0] + p.shape[1]));
      std::uniform_real_distribution<double> u(-bound, bound);
      for (int64_t i = 0; i < p.numel; ++i) x[i] = float(u(rng));
    }
  }
  for (int64_t k = 0; k < config_.layers; ++k) {
    MsDeformAttnBlockWeights w(bo);
    ms_deform_attn_block_init(w, bo, rng());
    const std::string p = "encoder.layers." + std::to_string(k) + ".self_attn.";
    auto put = [&](const std::string& name, const auto& t) {
      const std::span<float> dst = store_.parameter(p + name);
      check(int64_t(dst.size()) == t.numel(), "DeformableClassifier: ", name, " size");
      std::copy_n(t.data(), t.numel(), dst.data());
    };
    put("value_proj.weight", w.value_proj_weight), put("value_proj.bias", w.value_proj_bias);
    put("sampling_offsets.weight", w.sampling_offsets_weight);
    put("sampling_offsets.bias", w.sampling_offsets_bias);
    put("attention_weights.weight", w.attention_weights_weight);
    put("attention_weights.bias", w.attention_weights_bias);
    put("output_proj.weight", w.output_proj_weight), put("output_proj.bias", w.output_proj_bias);
  }
  store_.reset_buffers();
}

ConstView2 DeformableClassifier::forward(ConstView4 x) {
  const auto& c = config_;
  const int64_t n = x.shape[0];
  check(n >= 1, "DeformableClassifier.forward: x: expected at least one image");
  check(x.shape[1] == c.num_channels && x.shape[2] == c.image_size && x.shape[3] == c.image_size,
        "DeformableClassifier.forward: x: expected [N, ", c.num_channels, ", ", c.image_size, ", ",
        c.image_size, "], got [", x.shape[0], ", ", x.shape[1], ", ", x.shape[2], ", ", x.shape[3],
        "]");
  check(x.stride[3] == 1 && x.stride[2] == x.shape[3] && x.stride[1] == x.shape[2] * x.shape[3] &&
            x.stride[0] == x.shape[1] * x.shape[2] * x.shape[3],
        "DeformableClassifier.forward: x must be contiguous NCHW");
  if (!acts_ || acts_->n != n) {
    acts_.reset();  // free the old buffers before allocating the new ones
    acts_ = std::make_unique<DeformableActivations>(c, n);
  }
  acts_->has_forward = false;
  acts_->training = training_;
  backbone_forward(x);
  encoder_forward();
  acts_->has_forward = true;
  return acts_->logits.view();
}

void DeformableClassifier::backward(ConstView2 d_logits) {
  check(acts_ && acts_->has_forward, "DeformableClassifier.backward: call forward() first");
  check(d_logits.shape[0] == acts_->n && d_logits.shape[1] == config_.num_labels &&
            d_logits.inner_contiguous(),
        "DeformableClassifier.backward: d_logits: expected [N, K] = [", acts_->n, ", ",
        config_.num_labels, "] with contiguous rows, got [", d_logits.shape[0], ", ",
        d_logits.shape[1], "]");
  encoder_backward(d_logits);
  backbone_backward();
}

namespace {
void conv_fwd(bool ref, View4 y, ConstView4 x, ConstView4 w, const Conv2dOptions& o) {
  (ref ? conv2d_forward_reference : conv2d_forward)(y, x, w, {}, o);
}
void conv_bwd(bool ref, View4 d_x, View4 d_w, ConstView4 d_y, ConstView4 x, ConstView4 w,
              const Conv2dOptions& o) {
  (ref ? conv2d_backward_reference : conv2d_backward)(d_x, d_w, {}, d_y, x, w, o);
}
Conv2dOptions stage_conv(size_t i) { return {.stride = i == 0 ? 1 : 2, .padding = 1}; }
}  // namespace

// h_i = ReLU(BN(conv(h_{i-1}))), h_{-1} = x.
void DeformableClassifier::backbone_forward(ConstView4 x) {
  DeformableActivations& a = *acts_;
  const int64_t n = a.n;
  const auto& c = config_;
  const std::array<int64_t, 4> xs{n, c.num_channels, c.image_size, c.image_size};
  if (a.x.shape() != xs) a.x = T4(xs);
  std::copy_n(x.data, a.x.numel(), a.x.data());
  const BatchNormOptions bno{.eps = float(c.batch_norm_eps),
                             .momentum = float(c.batch_norm_momentum),
                             .training = training_};
  const T4* in = &a.x;
  for (size_t i = 0; i < a.stages.size(); ++i) {
    DeformableStage& s = a.stages[i];
    const BackboneIds& ids = backbone_[i];
    const int64_t cin = in->shape()[1];
    conv_fwd(reference_, s.conv.view(), in->view(),
             ConstView4::contiguous(param(ids.conv).data(), {s.channels, cin, 3, 3}),
             stage_conv(i));
    batch_norm2d_forward(s.act.view(), s.mean, s.rstd, store_.buffer(ids.bn.running_mean),
                         store_.buffer(ids.bn.running_var), s.conv.view(), param(ids.bn.affine.weight),
                         param(ids.bn.affine.bias), bno);
    float* h = s.act.data();
    for (int64_t e = 0; e < s.act.numel(); ++e) h[e] = std::max(h[e], 0.0f);
    in = &s.act;
  }
}

// From stages[i].d_act (the levels' token gradients, set by encoder_backward; 0 for the stem),
// last stage first: d_act ← d_act ⊙ [act > 0]; d_conv = BN'(d_act); d_w += conv'(d_conv); and
// the previous stage's d_act += conv_transpose(d_conv) (computed into its d_conv as scratch).
void DeformableClassifier::backbone_backward() {
  DeformableActivations& a = *acts_;
  const auto& c = config_;
  const BatchNormOptions bno{.eps = float(c.batch_norm_eps),
                             .momentum = float(c.batch_norm_momentum),
                             .training = a.training};  // the forward's mode, whatever it is now
  for (size_t i = a.stages.size(); i-- > 0;) {
    DeformableStage& s = a.stages[i];
    const BackboneIds& ids = backbone_[i];
    float* g = s.d_act.data();
    const float* h = s.act.data();
    for (int64_t e = 0; e < s.act.numel(); ++e) g[e] = h[e] > 0.0f ? g[e] : 0.0f;
    batch_norm2d_backward(s.d_conv.view(), grad_vec(ids.bn.affine.weight), grad_vec(ids.bn.affine.bias),
                          s.d_act.view(), s.conv.view(), param(ids.bn.affine.weight), param(ids.bn.affine.bias),
                          s.mean, s.rstd, bno);
    const T4& in = i == 0 ? a.x : a.stages[i - 1].act;
    const int64_t cin = in.shape()[1];
    View4 d_in{};
    if (i > 0) d_in = a.stages[i - 1].d_conv.view();
    conv_bwd(reference_, d_in,
             View4::contiguous(grad_vec(ids.conv).data(), {s.channels, cin, 3, 3}),
             s.d_conv.view(), in.view(),
             ConstView4::contiguous(param(ids.conv).data(), {s.channels, cin, 3, 3}),
             stage_conv(i));
    if (i > 0) {
      float* d = a.stages[i - 1].d_act.data();
      const float* e = a.stages[i - 1].d_conv.data();
      for (int64_t k = 0; k < a.stages[i - 1].d_act.numel(); ++k) d[k] += e[k];
    }
  }
}

}  // namespace attnkit
