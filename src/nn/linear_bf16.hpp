#pragma once
// The linear layer's bf16 mixed-precision path (matmul_precision() == kBf16): the same contract
// as linear_forward / linear_backward (arguments already checked), products by gemm_bf16.
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit::nn {

// y[T, out] = bf16(x)·bf16(W)ᵀ + b, float32 accumulation, bias added in float32.
void linear_forward_bf16(View2 y, ConstView2 x, ConstView2 w, std::span<const float> b);
// d_x[T, in] = bf16(d_y)·bf16(W), d_W[out, in] += bf16(d_y)ᵀ·bf16(x), d_b[out] += Σ_t d_y[t, :]
// (float32 d_y, summed in double); absent outputs are skipped.
void linear_backward_bf16(View2 d_x, View2 d_w, std::span<float> d_b, ConstView2 d_y, ConstView2 x,
                          ConstView2 w);

}  // namespace attnkit::nn
