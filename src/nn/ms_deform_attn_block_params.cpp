// MSDeformAttn parameters: owning storage, Deformable DETR's initialisation, argument checks.
// PyTorch (Deformable DETR's MSDeformAttn._reset_parameters):
//   thetas = arange(H)·2π/H; grid = stack([cos, sin], -1); grid /= grid.abs().max(-1, keepdim)
//   grid = grid[:, None, None].repeat(1, Lv, P, 1); grid[:, :, p] *= p + 1 → sampling_offsets.bias
#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "attnkit/nn/ms_deform_attn_block.hpp"

namespace attnkit {

void MsDeformAttnBlockOptions::validate() const {
  check(heads >= 1 && d_model >= 1 && d_model % heads == 0, "MSDeformAttn: opts.d_model = ",
        d_model, " must be a positive multiple of opts.heads = ", heads);
  check(levels >= 1, "MSDeformAttn: opts.levels must be >= 1, got ", levels);
  check(points >= 1, "MSDeformAttn: opts.points must be >= 1, got ", points);
}

MsDeformAttnBlockWeights::MsDeformAttnBlockWeights(const MsDeformAttnBlockOptions& o)
    : value_proj_weight({o.d_model, o.d_model}),
      sampling_offsets_weight({o.offsets_width(), o.d_model}),
      attention_weights_weight({o.weights_width(), o.d_model}),
      output_proj_weight({o.d_model, o.d_model}),
      value_proj_bias({o.d_model}),
      sampling_offsets_bias({o.offsets_width()}),
      attention_weights_bias({o.weights_width()}),
      output_proj_bias({o.d_model}) {
  o.validate();
}

MsDeformAttnBlockParams MsDeformAttnBlockWeights::params() const {
  auto s = [](const Tensor<float, 1>& t) {
    return std::span<const float>(t.data(), size_t(t.numel()));
  };
  return {value_proj_weight.view(),        s(value_proj_bias),
          sampling_offsets_weight.view(),  s(sampling_offsets_bias),
          attention_weights_weight.view(), s(attention_weights_bias),
          output_proj_weight.view(),       s(output_proj_bias)};
}

MsDeformAttnBlockGrads MsDeformAttnBlockWeights::grads() {
  auto s = [](Tensor<float, 1>& t) { return std::span<float>(t.data(), size_t(t.numel())); };
  return {value_proj_weight.view(),        s(value_proj_bias),
          sampling_offsets_weight.view(),  s(sampling_offsets_bias),
          attention_weights_weight.view(), s(attention_weights_bias),
          output_proj_weight.view(),       s(output_proj_bias)};
}

void ms_deform_attn_block_init(MsDeformAttnBlockWeights& w, const MsDeformAttnBlockOptions& o,
                               uint64_t seed) {
  o.validate();
  check(w.sampling_offsets_bias.numel() == o.offsets_width() &&
            w.value_proj_weight.numel() == o.d_model * o.d_model,
        "ms_deform_attn_block_init: weights were sized for other options");
  std::mt19937_64 rng(seed);
  auto xavier = [&](Tensor<float, 2>& t) {  // fan_in = fan_out = C
    const double bound = std::sqrt(6.0 / double(t.shape()[0] + t.shape()[1]));
    std::uniform_real_distribution<double> u(-bound, bound);
    for (auto& x : t.storage()) x = float(u(rng));
  };
  xavier(w.value_proj_weight);
  xavier(w.output_proj_weight);
  for (auto* t : {&w.value_proj_bias, &w.attention_weights_bias, &w.output_proj_bias})
    std::fill(t->storage().begin(), t->storage().end(), 0.0f);
  for (auto* t : {&w.sampling_offsets_weight, &w.attention_weights_weight})
    std::fill(t->storage().begin(), t->storage().end(), 0.0f);
  float* b = w.sampling_offsets_bias.data();
  for (int64_t h = 0; h < o.heads; ++h) {
    const double theta = double(h) * 2.0 * std::numbers::pi / double(o.heads);
    double dx = std::cos(theta), dy = std::sin(theta);
    const double m = std::max(std::abs(dx), std::abs(dy));
    dx /= m;
    dy /= m;
    for (int64_t l = 0; l < o.levels; ++l)
      for (int64_t p = 0; p < o.points; ++p) {
        const int64_t i = ((h * o.levels + l) * o.points + p) * 2;
        b[i] = float(dx * double(p + 1));
        b[i + 1] = float(dy * double(p + 1));
      }
  }
}

}  // namespace attnkit
