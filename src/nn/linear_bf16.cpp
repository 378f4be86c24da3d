// Linear layer in the bf16 mixed-precision mode (ops/matmul_precision.hpp): the three products of
// a linear layer (from y = x·Wᵀ + b: y, d_x = d_y·W, d_W += d_yᵀ·x) by gemm_bf16, bf16 inputs
// with float32 accumulation; bias, bias gradient, weights and weight gradients stay float32.
// PyTorch: under torch.autocast("cpu", dtype=torch.bfloat16), F.linear(x, W, b) and its backward.
#include "linear_bf16.hpp"

#include <vector>

#include "attnkit/nn/parallel_blocks.hpp"
#include "attnkit/ops/gemm_bf16.hpp"
#include "nn_common.hpp"

namespace attnkit::nn {

void linear_forward_bf16(View2 y, ConstView2 x, ConstView2 w, std::span<const float> b) {
  const int64_t t = x.shape[0], in = x.shape[1], out = w.shape[0];
  gemm_bf16(false, true, t, out, in, x.data, ld(x), w.data, ld(w), 0.0f, y.data, ld(y));
  if (b.empty()) return;
  parallel_each_row(t, out, [&](int64_t i) {
    float* yr = y.ptr(i);
    for (int64_t j = 0; j < out; ++j) yr[j] += b[size_t(j)];
  });
}

void linear_backward_bf16(View2 d_x, View2 d_w, std::span<float> d_b, ConstView2 d_y, ConstView2 x,
                          ConstView2 w) {
  const int64_t t = x.shape[0], in = x.shape[1], out = w.shape[0];
  if (present(d_x))
    gemm_bf16(false, false, t, in, out, d_y.data, ld(d_y), w.data, ld(w), 0.0f, d_x.data, ld(d_x));
  if (present(d_w))
    gemm_bf16(true, false, out, in, t, d_y.data, ld(d_y), x.data, ld(x), 1.0f, d_w.data, ld(d_w));
  if (d_b.empty()) return;
  // Column sums in double, each block of channels summing its tokens in order.
  parallel_columns(out, [&](int64_t c0, int64_t c1) {
    std::vector<double> acc(size_t(c1 - c0), 0.0);
    for (int64_t i = 0; i < t; ++i) {
      const float* g = d_y.ptr(i);
      for (int64_t c = c0; c < c1; ++c) acc[size_t(c - c0)] += double(g[c]);
    }
    for (int64_t c = c0; c < c1; ++c) d_b[size_t(c)] += float(acc[size_t(c - c0)]);
  });
}

}  // namespace attnkit::nn
