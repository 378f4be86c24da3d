#pragma once
// Batch normalisation over NCHW activations (Ioffe & Szegedy 2015): per channel c,
//   y = (x - μ_c)·r_c·w_c + b_c,  r_c = 1/sqrt(σ²_c + eps)
// Training: μ, σ² are the batch statistics over (N, H, W) (σ² biased), and the running
// statistics move toward them: running_mean ← (1-m)·running_mean + m·μ, running_var ←
// (1-m)·running_var + m·σ²·M/(M-1) (unbiased, M = N·H·W), as PyTorch does. Eval: μ, σ² are the
// running statistics, which stay unchanged.
// PyTorch: torch.nn.functional.batch_norm(x, running_mean, running_var, w, b, training, m, eps).
//
// Shapes: x, y, d_x, d_y [N, C, H, W] (contiguous NCHW); w, b, d_w, d_b, running_mean,
// running_var [C]; mean, rstd [C] (the μ and r used, saved by the forward for the backward).
// w or b empty means 1 or 0; the matching gradient must then be empty too. y may alias x.
// Gradient contract (docs/architecture.md): backward ADDS (+=) into d_w, d_b and ASSIGNS (=) d_x.
// Statistics and parameter gradients are summed per channel in double in a fixed order; channels
// run in parallel: deterministic for any thread count.
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct BatchNormOptions {
  float eps = 1e-5f;       // added to the variance, >= 0
  float momentum = 0.1f;   // running-statistics update rate m in [0, 1]
  bool training = true;    // batch statistics (true) or running statistics (false)
  bool relu = false;       // y = max(BN(x), 0) in the same pass (a conv block's BN + ReLU); the
                           // backward then takes d_y as the gradient of that y and applies the
                           // ReLU's mask itself (recomputed from x, bitwise the forward's y > 0)
};

// y[N, C, H, W] = (x - mean)·rstd·w + b per channel; writes mean[C], rstd[C] and, in training,
// updates running_mean[C], running_var[C] (which may be empty in training: no running stats).
// y may be empty (View4{}): only the statistics, for a consumer that applies
// batch_norm2d_scale_shift itself (max_pool2d_affine_relu_forward).
void batch_norm2d_forward(View4 y, std::span<float> mean, std::span<float> rstd,
                          std::span<float> running_mean, std::span<float> running_var,
                          ConstView4 x, std::span<const float> w, std::span<const float> b,
                          const BatchNormOptions& opts = {});
// scale[C], shift[C] of the map the forward applies, y = x·scale + shift (one fused multiply-add),
// from its mean[C], rstd[C] and w, b: bitwise the forward's.
void batch_norm2d_scale_shift(std::span<float> scale, std::span<float> shift, std::span<const float> mean,
                              std::span<const float> rstd, std::span<const float> w, std::span<const float> b);
// Training: d_x = r·(g - mean_c(g) - x̂·mean_c(g·x̂)), g = d_y·w, x̂ = (x - μ)·r, means over
// (N, H, W); eval: d_x = d_y·w·r. d_w[C] += Σ d_y·x̂; d_b[C] += Σ d_y. mean, rstd: the forward's;
// w, b: the forward's parameters (b is read only with opts.relu, where d_y is first zeroed
// wherever the forward's output was not > 0). d_x may alias d_y.
void batch_norm2d_backward(View4 d_x, std::span<float> d_w, std::span<float> d_b, ConstView4 d_y,
                           ConstView4 x, std::span<const float> w, std::span<const float> b,
                           std::span<const float> mean, std::span<const float> rstd,
                           const BatchNormOptions& opts = {});
// batch_norm2d_backward of d_y = max_pool2d_backward(d_pooled, argmax) (the gradient of a max
// pool over the batch norm's output) without storing d_y: each plane is scattered into a
// per-thread buffer where the backward reads it. d_pooled [N, C, OH, OW], argmax [N·C·OH·OW] as
// max_pool2d_forward saved it; bitwise the two calls' d_x, d_w, d_b. d_x must not alias d_pooled.
void batch_norm2d_max_pool_backward(View4 d_x, std::span<float> d_w, std::span<float> d_b, ConstView4 d_pooled,
                                    std::span<const int32_t> argmax, ConstView4 x, std::span<const float> w,
                                    std::span<const float> b, std::span<const float> mean,
                                    std::span<const float> rstd, const BatchNormOptions& opts = {});

}  // namespace attnkit
