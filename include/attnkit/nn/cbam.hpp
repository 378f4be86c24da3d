#pragma once
// Convolutional Block Attention Module (Woo et al. 2018): a channel gate, then a spatial gate.
//   channel: m(v) = relu(v·w1ᵀ + b1)·w2ᵀ + b2 (one MLP shared by both descriptors, R = C/r hidden)
//            a_c = sigmoid(m(mean_hw x) + m(max_hw x))  [N, C];   x1 = x ⊙ a_c[:, :, None, None]
//   spatial: d = [mean_c x1; max_c x1]  [N, 2, H, W];  a_s = sigmoid(conv2d(d, ws, bs, pad k/2))
//            [N, 1, H, W] (ws [1, 2, k, k], k odd, 7 in the paper);   y = x1 ⊙ a_s
// PyTorch (as tests/python/test_vision.py writes it): mlp = lambda v: F.linear(F.relu(
// F.linear(v, w1, b1)), w2, b2); x1 = x * torch.sigmoid(mlp(x.mean((2, 3))) +
// mlp(x.amax((2, 3))))[..., None, None]; d = torch.cat([x1.mean(1, True), x1.amax(1, True)], 1);
// y = x1 * torch.sigmoid(F.conv2d(d, ws, bs, padding=k // 2)).
//
// Shapes: x, y, d_x, d_y [N, C, H, W] (contiguous NCHW); w1 [R, C], b1 [R], w2 [C, R], b2 [C],
// ws [1, 2, k, k], bs [1] (biases may be empty). The forward fills CbamCache for the backward.
// Gradient contract: backward ADDS (+=) into the CbamGrads parameter gradients (each may be
// empty: skipped) and ASSIGNS (=) d_x. Max gradients go to the first maximum. Built from
// linear, conv2d and the pooling layers: deterministic for any thread count.
#include <cstdint>
#include <span>
#include <vector>

#include "attnkit/core/tensor.hpp"
#include "attnkit/nn/se_block.hpp"

namespace attnkit {

struct CbamWeights : SeWeights {  // the channel gate's MLP w1, b1, w2, b2 (R = C/r hidden)
  ConstView4 ws;                // [1, 2, k, k], k odd
  std::span<const float> bs;    // [1] or empty
};

struct CbamGrads : SeGrads {  // d_w1, d_b1, d_w2, d_b2 of the channel gate's MLP
  View4 d_ws;                   // [1, 2, k, k] or empty
  std::span<float> d_bs;        // [1] or empty
};

// Activations the backward needs.
struct CbamCache {
  Tensor<float, 2> pooled;          // [2N, C]: mean_hw x (rows 0..N-1), max_hw x (rows N..2N-1)
  std::vector<int32_t> max_index;   // [N·C]: h·W + w of each plane's maximum
  Tensor<float, 2> hidden;          // [2N, R] after ReLU
  Tensor<float, 2> channel_gate;    // a_c [N, C]
  Tensor<float, 4> x1;              // [N, C, H, W] = x ⊙ a_c
  Tensor<float, 4> descriptor;      // d [N, 2, H, W]
  std::vector<int32_t> channel_argmax;  // [N·H·W]: channel of max_c x1
  Tensor<float, 4> spatial_gate;    // a_s [N, 1, H, W]
};

// y[N, C, H, W] = CBAM(x) (channel gate then spatial gate); fills cache. y may not alias x.
// y may be empty (View4{}): the last product y = x1 ⊙ a_s is left to the caller, who finds x1 and
// a_s in the cache (the CNN folds it into its residual add: cbam_residual_relu).
void cbam_forward(View4 y, CbamCache& cache, ConstView4 x, const CbamWeights& w);
// o[N, C, H, W] = max(x1 ⊙ a_s + shortcut, 0) from a filled cache: CBAM's output added to a
// residual shortcut and passed through a ReLU in one pass (the product and the sum may be one
// fused multiply-add). o may alias shortcut.
void cbam_residual_relu(View4 o, const CbamCache& cache, ConstView4 shortcut);
// Gradients of cbam_forward from d_y: d_x assigned, parameter gradients added into g.
void cbam_backward(View4 d_x, const CbamGrads& g, ConstView4 d_y, ConstView4 x,
                   const CbamWeights& w, const CbamCache& cache);

}  // namespace attnkit
