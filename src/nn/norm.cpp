// LayerNorm and RMSNorm: the argument checks both passes share, and the forward fast path (one
// task per block of rows; row sums in double, elementwise work in float). The backward is in
// norm_backward.cpp. PyTorch: F.layer_norm(x, (C,), w, b, eps);
// x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.
#include "attnkit/nn/norm.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/core/parallel.hpp"

#include "nn_common.hpp"

namespace attnkit {
namespace nn {

void check_norm(const char* fn, ConstView2 out, const char* out_name, ConstView2 x,
                std::span<const float> w, std::span<const float> b) {
  const int64_t t = x.shape[0], c = x.shape[1];
  check_matrix(x, fn, "x", "[T, C]", t, c);
  check_matrix(out, fn, out_name, "[T, C]", t, c);
  check_span(w, fn, "w", "[C]", c, true);
  check_span(b, fn, "b", "[C]", c, true);
}

void check_norm_grads(const char* fn, std::span<const float> w, std::span<float> d_w,
                      std::span<const float> b, std::span<float> d_b) {
  check(!(w.empty() && !d_w.empty()), fn, ": d_w: given but the layer has no weight (w empty)");
  check(!(b.empty() && !d_b.empty()), fn, ": d_b: given but the layer has no bias (b empty)");
  check_span(std::span<const float>(d_w), fn, "d_w", "[C]", int64_t(w.size()), true);
  check_span(std::span<const float>(d_b), fn, "d_b", "[C]", int64_t(b.size()), true);
}

void check_eps(const char* fn, float eps) {
  check(std::isfinite(eps) && eps >= 0, fn, ": eps: expected a finite value >= 0, got ", eps);
}

void check_norm_backward(const char* fn, ConstView2 d_x, std::span<float> d_w,
                         std::span<float> d_b, ConstView2 d_y, ConstView2 x,
                         std::span<const float> w, std::span<const float> mean,
                         std::span<const float> rstd, ConstView2 d_residual, bool layer_norm) {
  check_norm(fn, d_x, "d_x", x, w, {});
  check_matrix(d_y, fn, "d_y", "[T, C]", x.shape[0], x.shape[1]);
  if (layer_norm) check_span(mean, fn, "mean", "[T]", x.shape[0]);
  check_span(rstd, fn, "rstd", "[T]", x.shape[0]);
  if (layer_norm) check_span(std::span<const float>(d_b), fn, "d_b", "[C]", x.shape[1], true);
  check_norm_grads(fn, w, d_w, {}, {});
  check_residual(fn, d_residual, x);
}

void check_residual(const char* fn, ConstView2 d_residual, ConstView2 x) {
  if (present(d_residual)) check_matrix(d_residual, fn, "d_residual", "[T, C]", x.shape[0], x.shape[1]);
}

}  // namespace nn

namespace {

// Σ_j (x[j] - m)² in double with eight independent partial sums.
double centered_sq_sum(const float* x, int64_t n, double m) {
  double acc[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) {
      const double d = double(x[j + l]) - m;
      acc[l] += d * d;
    }
  double s = 0;
  for (; j < n; ++j) s += (double(x[j]) - m) * (double(x[j]) - m);
  for (double p : acc) s += p;
  return s;
}

}  // namespace

void layer_norm_forward(View2 y, std::span<float> mean, std::span<float> rstd, ConstView2 x,
                        std::span<const float> w, std::span<const float> b, float eps) {
  const char* fn = "layer_norm_forward";
  nn::check_norm(fn, y, "y", x, w, b);
  nn::check_span(mean, fn, "mean", "[T]", x.shape[0]);
  nn::check_span(rstd, fn, "rstd", "[T]", x.shape[0]);
  nn::check_eps(fn, eps);
  const int64_t c = x.shape[1];
  nn::parallel_each_row(x.shape[0], c, [&](int64_t t) {
    const float* xr = x.ptr(t);
    const double mu = c ? nn::sum_double(xr, c) / double(c) : 0.0;
    const double var = c ? centered_sq_sum(xr, c, mu) / double(c) : 0.0;
    const float m = float(mu), r = float(1.0 / std::sqrt(var + double(eps)));
    mean[size_t(t)] = m;
    rstd[size_t(t)] = r;
    float* yr = y.ptr(t);
    for (int64_t j = 0; j < c; ++j)
      yr[j] = (xr[j] - m) * r * nn::weight_or_one(w, j) + nn::bias_or_zero(b, j);
  });
}

void rms_norm_forward(View2 y, std::span<float> rstd, ConstView2 x, std::span<const float> w,
                      float eps) {
  const char* fn = "rms_norm_forward";
  nn::check_norm(fn, y, "y", x, w, {});
  nn::check_span(rstd, fn, "rstd", "[T]", x.shape[0]);
  nn::check_eps(fn, eps);
  const int64_t c = x.shape[1];
  nn::parallel_each_row(x.shape[0], c, [&](int64_t t) {
    const float* xr = x.ptr(t);
    const double ms = c ? nn::dot_double(xr, xr, c) / double(c) : 0.0;
    const float r = float(1.0 / std::sqrt(ms + double(eps)));
    rstd[size_t(t)] = r;
    float* yr = y.ptr(t);
    for (int64_t j = 0; j < c; ++j) yr[j] = xr[j] * r * nn::weight_or_one(w, j);
  });
}

}  // namespace attnkit
