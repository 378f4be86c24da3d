// Batch norm over NCHW (see batch_norm2d.hpp), one task per channel; sums in double.
// Backward of y = x̂·w + b, x̂ = (x - μ)·r with batch statistics (g = d_y·w, means over N·H·W):
//   d_x = r·(g - mean(g) - x̂·mean(g·x̂));  with running statistics μ, r are constants: d_x = g·r.
// The parameter sums run before d_x is written, so d_x may alias d_y.
#include "attnkit/nn/batch_norm2d.hpp"

#include <cmath>

#include "attnkit/core/parallel.hpp"
#include "nn_common.hpp"
#include "vision_common.hpp"

namespace attnkit {
namespace {

void check_params(const char* fn, int64_t c, std::span<const float> w, std::span<const float> b,
                  const BatchNormOptions& opts) {
  nn::check_span(w, fn, "w", "[C]", c, true);
  nn::check_span(b, fn, "b", "[C]", c, true);
  check(std::isfinite(opts.eps) && opts.eps >= 0, fn, ": eps: expected a finite value >= 0, got ", opts.eps);
  check(opts.momentum >= 0 && opts.momentum <= 1, fn, ": momentum: expected [0, 1], got ", opts.momentum);
}

inline float weight(std::span<const float> w, int64_t c) { return w.empty() ? 1.0f : w[size_t(c)]; }
inline float bias(std::span<const float> b, int64_t c) { return b.empty() ? 0.0f : b[size_t(c)]; }

}  // namespace

void batch_norm2d_forward(View4 y, std::span<float> mean, std::span<float> rstd,
                          std::span<float> running_mean, std::span<float> running_var,
                          ConstView4 x, std::span<const float> w, std::span<const float> b,
                          const BatchNormOptions& opts) {
  const char* fn = "batch_norm2d_forward";
  const int64_t n = x.shape[0], c = x.shape[1], hw = x.shape[2] * x.shape[3], m = n * hw;
  nn::check_nchw(x, fn, "x", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  nn::check_nchw(y, fn, "y", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  check_params(fn, c, w, b, opts);
  nn::check_span(mean, fn, "mean", "[C]", c);
  nn::check_span(rstd, fn, "rstd", "[C]", c);
  nn::check_span(running_mean, fn, "running_mean", "[C]", c, opts.training);
  nn::check_span(running_var, fn, "running_var", "[C]", c, opts.training);
  check(running_mean.empty() == running_var.empty(), fn,
        ": running_mean, running_var: give both or neither");
  if (opts.training) check(m >= 2 || c == 0, fn, ": x: training needs more than one value per channel (N·H·W = ", m, ")");
  parallel_for(c, [&](int64_t ch) {
    double mu, var;
    if (opts.training) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += nn::sum_double(x.ptr(i, ch), hw);
      mu = s / double(m);
      double q = 0;
      for (int64_t i = 0; i < n; ++i) q += nn::sum_squared_deviation_double(x.ptr(i, ch), hw, mu);
      var = q / double(m);
      if (!running_mean.empty()) {
        const double mo = opts.momentum;
        running_mean[size_t(ch)] = float((1 - mo) * running_mean[size_t(ch)] + mo * mu);
        running_var[size_t(ch)] =
            float((1 - mo) * running_var[size_t(ch)] + mo * var * double(m) / double(m - 1));
      }
    } else {
      mu = running_mean[size_t(ch)];
      var = running_var[size_t(ch)];
    }
    const float mf = float(mu), r = float(1.0 / std::sqrt(var + double(opts.eps)));
    mean[size_t(ch)] = mf;
    rstd[size_t(ch)] = r;
    const float a = r * weight(w, ch), sh = bias(b, ch);
    for (int64_t i = 0; i < n; ++i) {
      const float* p = x.ptr(i, ch);
      float* q = y.ptr(i, ch);
      for (int64_t j = 0; j < hw; ++j) q[j] = (p[j] - mf) * a + sh;
    }
  });
}

void batch_norm2d_backward(View4 d_x, std::span<float> d_w, std::span<float> d_b, ConstView4 d_y,
                           ConstView4 x, std::span<const float> w, std::span<const float> mean,
                           std::span<const float> rstd, const BatchNormOptions& opts) {
  const char* fn = "batch_norm2d_backward";
  const int64_t n = x.shape[0], c = x.shape[1], hw = x.shape[2] * x.shape[3], m = n * hw;
  nn::check_nchw(x, fn, "x", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  nn::check_nchw(d_y, fn, "d_y", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  nn::check_nchw(d_x, fn, "d_x", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  check_params(fn, c, w, {}, opts);
  nn::check_span(mean, fn, "mean", "[C]", c);
  nn::check_span(rstd, fn, "rstd", "[C]", c);
  nn::check_span(std::span<const float>(d_b), fn, "d_b", "[C]", c, true);
  nn::check_norm_grads(fn, w, d_w, {}, {});
  parallel_for(c, [&](int64_t ch) {
    const float mu = mean[size_t(ch)], r = rstd[size_t(ch)], wc = weight(w, ch);
    // Σ d_y and Σ d_y·x̂ = r·(Σ d_y·x - μ·Σ d_y) over (N, H, W), in double.
    double sum_g = 0, sum_gxraw = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum_g += nn::sum_double(d_y.ptr(i, ch), hw);
      sum_gxraw += nn::dot_double(d_y.ptr(i, ch), x.ptr(i, ch), hw);
    }
    const double sum_gx = double(r) * (sum_gxraw - double(mu) * sum_g);
    if (!d_w.empty()) d_w[size_t(ch)] += float(sum_gx);
    if (!d_b.empty()) d_b[size_t(ch)] += float(sum_g);
    const float a = opts.training ? float(sum_g / double(m)) * wc : 0.0f;
    const float bb = opts.training ? float(sum_gx / double(m)) * wc : 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float *p = x.ptr(i, ch), *g = d_y.ptr(i, ch);
      float* dx = d_x.ptr(i, ch);
      for (int64_t j = 0; j < hw; ++j) dx[j] = r * (g[j] * wc - a - (p[j] - mu) * r * bb);
    }
  });
}

}  // namespace attnkit
