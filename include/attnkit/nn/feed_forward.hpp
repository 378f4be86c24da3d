#pragma once
// The GELU feed-forward block of a transformer encoder layer (BERT, ViT, Deformable DETR's FFN),
// forward and backward, llm.c style (outputs first, saved activations in a caller-owned cache, no
// autograd graph). x [T, C] is the block input (already normed where the model norms first).
//
//   pre = x·W₁ᵀ + b₁          [T, F]   (linear_forward)
//   u   = gelu(pre)           [T, F]   exact or tanh-approximated (gelu_forward)
//   out = u·W₂ᵀ + b₂          [T, C]   (linear_forward)
//
// Backward, from d_out, through the same layers in reverse:
//   d_u = d_out·W₂, d_W₂ += d_outᵀ·u, d_b₂ += Σ_t d_out;  d_pre = d_u·gelu'(pre);
//   d_x = d_pre·W₁, d_W₁ += d_preᵀ·x, d_b₁ += Σ_t d_pre.
// PyTorch: F.linear(F.gelu(F.linear(x, W1, b1), approximate='none' | 'tanh'), W2, b2).
// Weights in Hugging Face / torch.nn.Linear layout [out, in]: BERT and ViT's intermediate.dense
// (W₁) and output.dense (W₂), Deformable DETR's linear1 and linear2.
//
// Shapes: views may have row strides larger than their width, rows contiguous. out must not
// overlap x or the cache. The block is exactly its three layers called in order (and their
// backwards in reverse), so it is bitwise the same as calling them and inherits their
// determinism (bitwise identical for any thread count) and their matmul precision.
// Gradient contract (docs/architecture.md): feed_forward_backward ADDS (+=) into parameter
// gradients and ASSIGNS (=) d_x. An empty gradient view or span is skipped (frozen parameter, no
// bias, no input gradient).
// Reference: feed_forward_*_reference, the same composition of linear_*_reference and
// gelu_*_reference (double accumulation), so whole models can compare reference vs fast.
#include <span>

#include "attnkit/core/tensor.hpp"
#include "attnkit/nn/activation.hpp"

namespace attnkit {

struct FeedForwardParams {        // views of the caller's weights
  ConstView2 w1;                  // [F, C]
  std::span<const float> b1;      // [F] or empty (no bias)
  ConstView2 w2;                  // [C, F]
  std::span<const float> b2;      // [C] or empty (no bias)
};

struct FeedForwardGrads {         // same shapes as FeedForwardParams; +=, empty = skip
  View2 w1;
  std::span<float> b1;
  View2 w2;
  std::span<float> b2;
};

struct FeedForwardCache {         // written by the forward, read by the backward
  View2 pre;                      // [T, F] x·W₁ᵀ + b₁
  View2 u;                        // [T, F] gelu(pre)
};

// out[T, C] = gelu(x[T, C]·W₁ᵀ + b₁)·W₂ᵀ + b₂; fills cache.pre and cache.u ([T, F]).
void feed_forward_forward(View2 out, const FeedForwardCache& cache, ConstView2 x,
                          const FeedForwardParams& params, GeluApproximation approx);
// d_x[T, C] (assigned; empty: skipped) and parameter gradients (+=) from d_out[T, C], the
// forward's x and cache; d_hidden [T, F] is scratch (holds d_pre afterwards).
void feed_forward_backward(View2 d_x, const FeedForwardGrads& grads, View2 d_hidden,
                           ConstView2 d_out, ConstView2 x, const FeedForwardCache& cache,
                           const FeedForwardParams& params, GeluApproximation approx);

// Reference (linear_*_reference, gelu_*_reference) with the same contract as feed_forward_forward.
void feed_forward_forward_reference(View2 out, const FeedForwardCache& cache, ConstView2 x,
                                    const FeedForwardParams& params, GeluApproximation approx);
// Reference with the same contract as feed_forward_backward.
void feed_forward_backward_reference(View2 d_x, const FeedForwardGrads& grads, View2 d_hidden,
                                     ConstView2 d_out, ConstView2 x, const FeedForwardCache& cache,
                                     const FeedForwardParams& params, GeluApproximation approx);

}  // namespace attnkit
