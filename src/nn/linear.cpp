// Linear layer fast path: y = x·Wᵀ + b and d_x = d_y·W on weight_product (W packed once per
// training step where the packed GEMM applies, else parallel sgemm tiles), bias added in the tile
// epilogue while the tile is in cache. Backward (from y = x·Wᵀ + b):
//   d_x = d_y·W,  d_W += d_yᵀ·x,  d_b += Σ_t d_y[t, :].
// d_W and d_b of a small layer over many tokens split the token sum into fixed chunks
// (chunked_weight_gradient).
// With matmul_precision() == kBf16 the three products run on gemm_bf16 instead (bf16 inputs,
// float32 accumulation); bias and bias gradient stay float32.
// PyTorch: torch.nn.functional.linear(x, W, b).
#include "attnkit/nn/linear.hpp"

#include <algorithm>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/gemm_bf16.hpp"
#include "attnkit/ops/matmul_precision.hpp"

#include "nn_common.hpp"

namespace attnkit {
namespace nn {

void check_linear_forward(const char* fn, View2 y, ConstView2 x, ConstView2 w,
                          std::span<const float> b) {
  const int64_t t = x.shape[0], in = x.shape[1], out = w.shape[0];
  check_matrix(x, fn, "x", "[T, in]", t, in);
  check_matrix(w, fn, "w", "[out, in]", out, in);
  check_matrix(y, fn, "y", "[T, out]", t, out);
  check_span(b, fn, "b", "[out]", out, true);
}

void check_linear_backward(const char* fn, View2 d_x, View2 d_w, std::span<float> d_b,
                           ConstView2 d_y, ConstView2 x, ConstView2 w) {
  const int64_t t = x.shape[0], in = x.shape[1], out = w.shape[0];
  check_matrix(x, fn, "x", "[T, in]", t, in);
  check_matrix(w, fn, "w", "[out, in]", out, in);
  check_matrix(d_y, fn, "d_y", "[T, out]", t, out);
  if (present(d_x)) check_matrix(d_x, fn, "d_x", "[T, in]", t, in);
  if (present(d_w)) check_matrix(d_w, fn, "d_w", "[out, in]", out, in);
  check_span(d_b, fn, "d_b", "[out]", out, true);
}

}  // namespace nn

void nn::matmul_bias(View2 y, ConstView2 x, ConstView2 w, std::span<const float> b) {
  const int64_t t = x.shape[0], in = x.shape[1], out = w.shape[0];
  weight_product(true, t, out, in, x.data, ld(x), w.data, ld(w), y.data, ld(y),
                 [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
                   if (b.empty()) return;
                   for (int64_t i = i0; i < i1; ++i) {
                     float* yr = y.ptr(i);
                     for (int64_t j = j0; j < j1; ++j) yr[j] += b[size_t(j)];
                   }
                 });
}

namespace {

// d_w[out, in] += d_yᵀ·x and d_b[out] += Σ_t d_y[t, :] over T tokens, when d_w is small and T
// long (the weight gradients of a ViT or BERT layer over a whole batch). The tiled GEMM would run
// such a d_w, one tile, on one thread however long T is, so T is split into fixed chunks instead:
// each chunk's product and column sums (double) go to a partial buffer in parallel, and the
// partials are added in chunk order. Chunks depend only on (T, out, in): bitwise identical for
// any thread count. Each chunk's product is a one-thread sgemm call (oneDNN where it applies).
// Returns false (nothing done) for shapes that do not qualify.
bool chunked_weight_gradient(View2 d_w, std::span<float> d_b, ConstView2 d_y, ConstView2 x) {
  constexpr int64_t kMinChunk = 512, kMaxChunks = 16, kMaxElems = 256 * 512;
  const int64_t t = x.shape[0], in = x.shape[1], out = d_w.shape[0];
  const int64_t chunks = std::min(kMaxChunks, t / kMinChunk);
  if (chunks < 2 || out * in > kMaxElems) return false;
  const int64_t per = (t + chunks - 1) / chunks;
  thread_local std::vector<float> partial;  // reused: no page faults or zeroing per call
  thread_local std::vector<double> partial_b;
  // Each chunk's bias sums (rewritten for every token) start a cache line past the previous
  // chunk's last one: two threads' chunks never share a line.
  const int64_t b_stride = (out + 7) / 8 * 8 + 8;
  if (partial.size() < size_t(chunks * out * in)) partial.resize(size_t(chunks * out * in));
  if (partial_b.size() < size_t(chunks * b_stride)) partial_b.resize(size_t(chunks * b_stride));
  float* pw = partial.data();
  double* pb = partial_b.data();
  {
    BlasThreadsScope blas(1);
    parallel_for(chunks, [&](int64_t c) {
      const int64_t t0 = c * per, t1 = std::min(t, t0 + per);
      sgemm(true, false, out, in, t1 - t0, 1.0f, d_y.ptr(t0), nn::ld(d_y), x.ptr(t0), nn::ld(x),
            0.0f, pw + c * out * in, in);
      if (d_b.empty()) return;
      double* acc = pb + c * b_stride;
      std::fill_n(acc, out, 0.0);
      for (int64_t i = t0; i < t1; ++i) {
        const float* g = d_y.ptr(i);
        for (int64_t j = 0; j < out; ++j) acc[j] += double(g[j]);
      }
    });
  }
  nn::parallel_each_row(out, in * chunks, [&](int64_t r) {
    float* g = d_w.ptr(r);
    for (int64_t c = 0; c < chunks; ++c) {
      const float* p = pw + (c * out + r) * in;
      for (int64_t j = 0; j < in; ++j) g[j] += p[j];
    }
  });
  for (int64_t j = 0; j < int64_t(d_b.size()); ++j) {
    double sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += pb[c * b_stride + j];
    d_b[size_t(j)] += float(sum);
  }
  return true;
}

}  // namespace

void linear_forward(View2 y, ConstView2 x, ConstView2 w, std::span<const float> b) {
  nn::check_linear_forward("linear_forward", y, x, w, b);
  if (matmul_precision() != MatmulPrecision::kBf16) return nn::matmul_bias(y, x, w, b);
  const int64_t t = x.shape[0], in = x.shape[1], out = w.shape[0];
  gemm_bf16(false, true, t, out, in, x.data, nn::ld(x), w.data, nn::ld(w), 0.0f, y.data, nn::ld(y));
  if (b.empty()) return;
  nn::parallel_each_row(t, out, [&](int64_t i) {
    float* yr = y.ptr(i);
    for (int64_t j = 0; j < out; ++j) yr[j] += b[size_t(j)];
  });
}

void linear_backward(View2 d_x, View2 d_w, std::span<float> d_b, ConstView2 d_y, ConstView2 x,
                     ConstView2 w) {
  nn::check_linear_backward("linear_backward", d_x, d_w, d_b, d_y, x, w);
  const bool bf16 = matmul_precision() == MatmulPrecision::kBf16;
  const int64_t t = x.shape[0], in = x.shape[1], out = w.shape[0];
  if (nn::present(d_x) && bf16)
    gemm_bf16(false, false, t, in, out, d_y.data, nn::ld(d_y), w.data, nn::ld(w), 0.0f, d_x.data,
              nn::ld(d_x));
  else if (nn::present(d_x))
    nn::weight_product(false, t, in, out, d_y.data, nn::ld(d_y), w.data, nn::ld(w), d_x.data,
                       nn::ld(d_x));
  if (nn::present(d_w) && !bf16 && chunked_weight_gradient(d_w, d_b, d_y, x)) return;
  if (nn::present(d_w) && bf16)
    gemm_bf16(true, false, out, in, t, d_y.data, nn::ld(d_y), x.data, nn::ld(x), 1.0f, d_w.data,
              nn::ld(d_w));
  else if (nn::present(d_w))
    nn::parallel_sgemm(true, false, out, in, t, 1.0f, d_y.data, nn::ld(d_y), x.data, nn::ld(x),
                       1.0f, d_w.data, nn::ld(d_w));
  if (d_b.empty()) return;
  // Column sums in double, each block of channels summing its tokens in order.
  nn::parallel_columns(out, [&](int64_t c0, int64_t c1) {
    std::vector<double> acc(size_t(c1 - c0), 0.0);
    for (int64_t i = 0; i < t; ++i) {
      const float* g = d_y.ptr(i);
      for (int64_t c = c0; c < c1; ++c) acc[size_t(c - c0)] += double(g[c]);
    }
    for (int64_t c = c0; c < c1; ++c) d_b[size_t(c)] += float(acc[size_t(c - c0)]);
  });
}

}  // namespace attnkit
