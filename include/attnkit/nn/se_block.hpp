#pragma once
// Squeeze-and-Excitation block (Hu et al. 2018): channel attention from a global descriptor.
//   s = mean_{h,w} x  [N, C]                                     (squeeze)
//   z = relu(s·w1ᵀ + b1)  [N, C/r];  a = sigmoid(z·w2ᵀ + b2)  [N, C]   (excitation, reduction r)
//   y = x ⊙ a[:, :, None, None]                                  (channel scale)
// PyTorch: a = torch.sigmoid(F.linear(F.relu(F.linear(x.mean((2, 3)), w1, b1)), w2, b2));
// y = x * a[:, :, None, None] (torchvision's SqueezeExcitation with 1×1 convs is the same map).
//
// Shapes: x, y, d_x, d_y [N, C, H, W] (contiguous NCHW); w1 [R, C], b1 [R], w2 [C, R], b2 [C]
// with R = C / r hidden units (biases may be empty). The forward fills SeCache (resized as
// needed) for the backward. Gradient contract: backward ADDS (+=) into the SeGrads parameter
// gradients (each may be empty: skipped) and ASSIGNS (=) d_x. Built from linear and
// global_avg_pool, so it inherits their determinism.
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct SeWeights {
  ConstView2 w1;                // [R, C]
  std::span<const float> b1;    // [R] or empty
  ConstView2 w2;                // [C, R]
  std::span<const float> b2;    // [C] or empty
};

struct SeGrads {
  View2 d_w1;                   // [R, C] or empty
  std::span<float> d_b1;        // [R] or empty
  View2 d_w2;                   // [C, R] or empty
  std::span<float> d_b2;        // [C] or empty
};

// Activations the backward needs.
struct SeCache {
  Tensor<float, 2> squeeze;     // s [N, C]
  Tensor<float, 2> hidden;      // z [N, R] (after ReLU)
  Tensor<float, 2> gate;        // a [N, C] (after the sigmoid)
};

// y[N, C, H, W] = x ⊙ sigmoid(relu(mean_hw(x)·w1ᵀ + b1)·w2ᵀ + b2); fills cache. y may not alias x.
void se_block_forward(View4 y, SeCache& cache, ConstView4 x, const SeWeights& w);
// From d_y: d_a = Σ_hw d_y⊙x, through the sigmoid, linear, ReLU and linear backwards to d_s;
// d_x = d_y⊙a + d_s/(H·W) (assigned); parameter gradients added into g.
void se_block_backward(View4 d_x, const SeGrads& g, ConstView4 d_y, ConstView4 x,
                       const SeWeights& w, const SeCache& cache);

}  // namespace attnkit
