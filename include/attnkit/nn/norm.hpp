#pragma once
// Normalisation layers over the channel dimension of [T, C] activations.
//   layer_norm (Ba et al. 2016): y = (x - mean)·rstd·w + b, rstd = 1/sqrt(var + eps), var biased.
//     PyTorch: torch.nn.functional.layer_norm(x, (C,), w, b, eps).
//   rms_norm (Zhang & Sennrich 2019; Hugging Face Llama convention): y = x·rstd·w,
//     rstd = 1/sqrt(mean(x²) + eps). PyTorch: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
//     + eps) * w.
//
// Shapes: x, y, d_y, d_x [T, C] (rows contiguous, row stride >= C); w, b, d_w, d_b [C];
// mean, rstd [T] (saved by the forward for the backward). w or b empty means 1 or 0 (no affine
// parameter); the matching gradient must then be empty too. y may alias x and d_x may alias d_y
// (and d_residual, [T, C] or empty, which the backward adds to d_x).
// Gradient contract (docs/architecture.md): *_backward ADDS (+=) into parameter gradients (d_w,
// d_b) and ASSIGNS (=) input gradients (d_x). Parameter gradients are summed in double over
// fixed blocks of tokens, the blocks' sums added in block order: bitwise identical for any thread
// count. The backward reads x and d_y once (src/nn/norm_backward.cpp).
// Reference: norm_reference.cpp (double accumulation), same signatures.
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

// y[T, C] = (x - mean)·rstd·w + b per row; writes mean[T] and rstd[T] (1/sqrt(var + eps)).
void layer_norm_forward(View2 y, std::span<float> mean, std::span<float> rstd, ConstView2 x,
                        std::span<const float> w, std::span<const float> b, float eps);
// d_x[T, C] = d_residual + rstd·(g - mean_c(g) - x̂·mean_c(g·x̂)) with g = d_y·w,
// x̂ = (x - mean)·rstd (assigned; d_residual [T, C] empty: nothing added, else it is the gradient
// that reaches x around the norm, e.g. a pre-LN block's skip path, and may alias d_x);
// d_w[C] += Σ_t d_y·x̂; d_b[C] += Σ_t d_y. mean, rstd are the forward's.
void layer_norm_backward(View2 d_x, std::span<float> d_w, std::span<float> d_b, ConstView2 d_y,
                         ConstView2 x, std::span<const float> w, std::span<const float> mean,
                         std::span<const float> rstd, ConstView2 d_residual = {});

// y[T, C] = x·rstd·w per row; writes rstd[T] = 1/sqrt(mean(x²) + eps).
void rms_norm_forward(View2 y, std::span<float> rstd, ConstView2 x, std::span<const float> w,
                      float eps);
// d_x[T, C] = d_residual + rstd·(g - x·rstd²·mean_c(g·x)) with g = d_y·w (assigned; d_residual
// as in layer_norm_backward); d_w[C] += Σ_t d_y·x·rstd.
void rms_norm_backward(View2 d_x, std::span<float> d_w, ConstView2 d_y, ConstView2 x,
                       std::span<const float> w, std::span<const float> rstd,
                       ConstView2 d_residual = {});

// References with the same contracts as the four functions above.
void layer_norm_forward_reference(View2 y, std::span<float> mean, std::span<float> rstd,
                                  ConstView2 x, std::span<const float> w, std::span<const float> b,
                                  float eps);
void layer_norm_backward_reference(View2 d_x, std::span<float> d_w, std::span<float> d_b,
                                   ConstView2 d_y, ConstView2 x, std::span<const float> w,
                                   std::span<const float> mean, std::span<const float> rstd,
                                   ConstView2 d_residual = {});
void rms_norm_forward_reference(View2 y, std::span<float> rstd, ConstView2 x,
                                std::span<const float> w, float eps);
void rms_norm_backward_reference(View2 d_x, std::span<float> d_w, ConstView2 d_y, ConstView2 x,
                                 std::span<const float> w, std::span<const float> rstd,
                                 ConstView2 d_residual = {});

}  // namespace attnkit
