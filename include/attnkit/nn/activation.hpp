#pragma once
// Elementwise activations on [T, C] activations, forward and backward.
//   gelu (Hendrycks & Gimpel 2016): exact x·Φ(x) = x/2·(1 + erf(x/√2)), or the tanh approximation
//     x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (GPT-2, BERT's "gelu_new").
//     PyTorch: torch.nn.functional.gelu(x, approximate='none' | 'tanh').
//   silu (swish): x·sigmoid(x). PyTorch: torch.nn.functional.silu(x).
//   swiglu (Shazeer 2020; the Llama MLP): silu(gate)·up. PyTorch: F.silu(gate) * up.
//
// Shapes: every view [T, C] with contiguous rows (row stride >= C, so gate and up may be the two
// halves of a fused [T, 2·C] projection). Outputs may alias inputs of the same shape (in place).
// Gradient contract (docs/architecture.md): these layers have no parameters; *_backward ASSIGNS
// (=) input gradients. Reference: activation_reference.cpp (double), same signatures.
#include "attnkit/core/tensor.hpp"

namespace attnkit {

enum class GeluApproximation {
  kNone,  // exact: x·Φ(x) with erf
  kTanh,  // tanh approximation (GPT-2 / "gelu_new" / gelu_pytorch_tanh)
};

// y[T, C] = gelu(x), exact or tanh-approximated.
void gelu_forward(View2 y, ConstView2 x, GeluApproximation approx);
// d_x[T, C] = d_y·gelu'(x) (assigned).
void gelu_backward(View2 d_x, ConstView2 d_y, ConstView2 x, GeluApproximation approx);
// y[T, C] = x·sigmoid(x).
void silu_forward(View2 y, ConstView2 x);
// d_x[T, C] = d_y·sigmoid(x)·(1 + x·(1 - sigmoid(x))) (assigned).
void silu_backward(View2 d_x, ConstView2 d_y, ConstView2 x);
// y[T, C] = silu(gate)·up.
void swiglu_forward(View2 y, ConstView2 gate, ConstView2 up);
// d_gate[T, C] = d_y·up·silu'(gate), d_up[T, C] = d_y·silu(gate) (both assigned).
void swiglu_backward(View2 d_gate, View2 d_up, ConstView2 d_y, ConstView2 gate, ConstView2 up);

// References with the same contracts as the six functions above.
void gelu_forward_reference(View2 y, ConstView2 x, GeluApproximation approx);
void gelu_backward_reference(View2 d_x, ConstView2 d_y, ConstView2 x, GeluApproximation approx);
void silu_forward_reference(View2 y, ConstView2 x);
void silu_backward_reference(View2 d_x, ConstView2 d_y, ConstView2 x);
void swiglu_forward_reference(View2 y, ConstView2 gate, ConstView2 up);
void swiglu_backward_reference(View2 d_gate, View2 d_up, ConstView2 d_y, ConstView2 gate,
                               ConstView2 up);

}  // namespace attnkit
