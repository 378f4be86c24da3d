#pragma once
// Linear layer (fully connected): y = x·Wᵀ + b, the llm.c way (outputs first, no autograd graph).
// PyTorch: torch.nn.functional.linear(x, W, b). W uses Hugging Face's layout [out, in] (rows are
// output features), so checkpoints load without transposes.
//
// Shapes: x [T, in], W [out, in], b [out] or empty (no bias), y [T, out]. Views may have row
// strides larger than their width (e.g. slices of a fused buffer) but rows must be contiguous.
// Gradient contract (docs/architecture.md): *_backward ADDS (+=) into parameter gradients (d_w,
// d_b) and ASSIGNS (=) input gradients (d_x).
// Fast path: sgemm on fixed tiles in parallel_for, bitwise identical for any thread count.
// Reference: scalar loops, double accumulation (linear_reference.cpp), same signatures.
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

// y[T, out] = x[T, in]·w[out, in]ᵀ + b[out] (b empty: no bias).
void linear_forward(View2 y, ConstView2 x, ConstView2 w, std::span<const float> b);
// d_x[T, in] = d_y·w (assigned); d_w[out, in] += d_yᵀ·x; d_b[out] += Σ_t d_y[t, :]. Each
// gradient is skipped when its view/span is empty (frozen weights, no bias, no input gradient).
void linear_backward(View2 d_x, View2 d_w, std::span<float> d_b, ConstView2 d_y, ConstView2 x,
                     ConstView2 w);

// Reference (scalar, double accumulation) with the same contract as linear_forward.
void linear_forward_reference(View2 y, ConstView2 x, ConstView2 w, std::span<const float> b);
// Reference with the same contract as linear_backward.
void linear_backward_reference(View2 d_x, View2 d_w, std::span<float> d_b, ConstView2 d_y,
                               ConstView2 x, ConstView2 w);

}  // namespace attnkit
