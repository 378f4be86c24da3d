// Private to the deformable classifier: the saved activations of one forward over N images (every
// buffer the backward reads) and the backward's scratch, plus small tensor helpers.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "attnkit/core/tensor.hpp"
#include "attnkit/models/deformable_classifier.hpp"
#include "attnkit/nn/ms_deform_attn_block.hpp"

namespace attnkit {

namespace deformable_detail {
using T4 = Tensor<float, 4>;
using T2 = Tensor<float, 2>;
// [N·M, C] rows of a contiguous [N, M, C] view (and back).
inline View3 as3(T2& t, int64_t n) {
  return View3::contiguous(t.data(), {n, t.shape()[0] / n, t.shape()[1]});
}
inline ConstView3 as3(const T2& t, int64_t n) {
  return ConstView3::contiguous(t.data(), {n, t.shape()[0] / n, t.shape()[1]});
}
}  // namespace deformable_detail

// One backbone stage: conv → BN → ReLU.
struct DeformableStage {
  int64_t channels = 0, size = 0;
  deformable_detail::T4 conv, act;        // [N, w, s, s] conv output, ReLU(BN(conv))
  std::vector<float> mean, rstd;          // [w] the batch norm's statistics
  deformable_detail::T4 d_act, d_conv;    // backward: gradient w.r.t. act (accumulated), conv
};

// One encoder layer's saved activations, all [N·T, C] unless noted.
struct DeformableLayer {
  deformable_detail::T2 query;            // src + pos
  MsDeformAttnBlockCache attn;            // the block's cache (its output goes to `tmp`)
  deformable_detail::T2 sum1, h1, pre, u, sum2;  // src + attn, LN₁, linear1 [N·T, F], gelu, h1 + ffn
  std::vector<float> mean1, rstd1, mean2, rstd2;  // [N·T]
};

class DeformableActivations {
 public:
  DeformableActivations(const DeformableConfig& c, int64_t n) : n(n) {
    using deformable_detail::T2;
    const std::vector<int64_t> sizes = deformable_map_sizes(c);
    int64_t t = 0;
    for (size_t l = 1; l < sizes.size(); ++l) t += sizes[l] * sizes[l];
    tokens = t;
    const int64_t rows = n * t, cc = c.d_model, f = c.ffn_dim;
    stages.resize(c.widths.size());
    for (size_t i = 0; i < stages.size(); ++i) {
      DeformableStage& s = stages[i];
      s.channels = c.widths[i], s.size = sizes[i];
      const std::array<int64_t, 4> shape{n, s.channels, s.size, s.size};
      s.conv = deformable_detail::T4(shape), s.act = deformable_detail::T4(shape);
      s.d_act = deformable_detail::T4(shape), s.d_conv = deformable_detail::T4(shape);
      s.mean.assign(size_t(s.channels), 0.0f), s.rstd.assign(size_t(s.channels), 0.0f);
    }
    for (size_t l = 1; l < sizes.size(); ++l) {
      tok.emplace_back(std::array<int64_t, 2>{n * sizes[l] * sizes[l], c.widths[l]});
      d_tok.emplace_back(std::array<int64_t, 2>{n * sizes[l] * sizes[l], c.widths[l]});
      proj.emplace_back(std::array<int64_t, 2>{n * sizes[l] * sizes[l], cc});
    }
    for (int64_t k = 0; k <= c.layers; ++k) src.emplace_back(std::array<int64_t, 2>{rows, cc});
    layers.resize(size_t(c.layers));
    for (DeformableLayer& y : layers) {
      y.query = T2({rows, cc}), y.sum1 = T2({rows, cc}), y.h1 = T2({rows, cc});
      y.pre = T2({rows, f}), y.u = T2({rows, f}), y.sum2 = T2({rows, cc});
      for (auto* v : {&y.mean1, &y.rstd1, &y.mean2, &y.rstd2}) v->assign(size_t(rows), 0.0f);
    }
    ref = Tensor<float, 4>({n, t, c.levels(), 2});
    pos = T2({t, cc});
    pooled = T2({n, cc}), logits = T2({n, c.num_labels});
    tmp = T2({rows, cc}), d_src = T2({rows, cc}), d_a = T2({rows, cc}), d_h = T2({rows, cc});
    d_x = T2({rows, cc}), d_f = T2({rows, f}), d_pos = T2({t, cc}), d_pooled = T2({n, cc});
  }

  int64_t n = 0, tokens = 0;                // N images, T tokens per image
  deformable_detail::T4 x;                  // [N, Cin, S, S] copy of the input
  std::vector<DeformableStage> stages;      // backbone.0 .. backbone.Lv
  std::vector<deformable_detail::T2> tok, proj, d_tok;  // per level: pixels [N·HW, w], [N·HW, C]
  std::vector<deformable_detail::T2> src;   // [L+1] layer inputs [N·T, C]; src[L] is the output
  std::vector<DeformableLayer> layers;
  Tensor<float, 4> ref;                     // [N, T, Lv, 2] reference points
  deformable_detail::T2 pos;                // [T, C] sine + level embedding
  deformable_detail::T2 pooled, logits;     // [N, C], [N, K]
  deformable_detail::T2 tmp, d_src, d_a, d_h, d_x, d_f, d_pos, d_pooled;  // scratch
  bool has_forward = false;
  bool training = false;                    // the batch-norm mode of the forward
};

}  // namespace attnkit
