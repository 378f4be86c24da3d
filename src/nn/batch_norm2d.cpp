// Batch norm over NCHW (see batch_norm2d.hpp); sums in double.
// Backward of y = x̂·w + b, x̂ = (x - μ)·r with batch statistics (g = d_y·w, means over N·H·W):
//   d_x = r·(g - mean(g) - x̂·mean(g·x̂));  with running statistics μ, r are constants: d_x = g·r.
// The per-channel sums read the tensor in memory order: fixed groups of images accumulate their
// own partial sums, added in group order (results never depend on the thread count). The
// statistics take one pass, shifted by a sample of each channel (x[0, c, 0, 0]) so that
// Σ(x - k)² - (Σ(x - k))²/m does not cancel. The parameter sums run before d_x is written, so d_x
// may alias d_y.
#include "attnkit/nn/batch_norm2d.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

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

constexpr int64_t kGroups = 16;  // fixed reduction groups of images (a function of N only)

// Per-channel sums [C, 2] over the images: add(i, ch, acc) adds image i's plane ch into acc[0..2).
template <class Add>
std::vector<double> channel_sums(int64_t n, int64_t c, const Add& add) {
  std::vector<double> total(size_t(2 * c), 0.0);
  if (n == 0 || c == 0) return total;
  const int64_t groups = std::min(n, kGroups), per = (n + groups - 1) / groups;
  std::vector<double> part(size_t(groups * 2 * c), 0.0);
  parallel_for(groups, [&](int64_t grp) {
    double* acc = part.data() + grp * 2 * c;
    for (int64_t i = grp * per; i < std::min(n, (grp + 1) * per); ++i)
      for (int64_t ch = 0; ch < c; ++ch) add(i, ch, acc + 2 * ch);
  });
  for (int64_t grp = 0; grp < groups; ++grp)
    for (int64_t e = 0; e < 2 * c; ++e) total[size_t(e)] += part[size_t(grp * 2 * c + e)];
  return total;
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
  std::vector<double> sums;
  if (opts.training)
    sums = channel_sums(n, c, [&](int64_t i, int64_t ch, double* acc) {
      nn::shifted_sums_double(x.ptr(i, ch), hw, double(x.ptr(0, ch)[0]), acc[0], acc[1]);
    });
  std::vector<float> scale(size_t(c), 0.0f), shift(size_t(c), 0.0f);
  for (int64_t ch = 0; ch < c; ++ch) {
    double mu, var;
    if (opts.training) {
      const double k = x.ptr(0, ch)[0], s = sums[size_t(2 * ch)], q = sums[size_t(2 * ch + 1)];
      mu = k + s / double(m);
      var = std::max(0.0, (q - s * s / double(m)) / double(m));
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
    scale[size_t(ch)] = r * weight(w, ch);
    shift[size_t(ch)] = bias(b, ch) - mf * scale[size_t(ch)];
  }
  nn::parallel_rows(n * c, hw, [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const int64_t ch = pl % c;
      const float *p = x.ptr(pl / c, ch), a = scale[size_t(ch)], sh = shift[size_t(ch)];
      float* q = y.ptr(pl / c, ch);
      if (opts.relu) {
        for (int64_t j = 0; j < hw; ++j) q[j] = std::max(p[j] * a + sh, 0.0f);
      } else {
        for (int64_t j = 0; j < hw; ++j) q[j] = p[j] * a + sh;
      }
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
  // Σ d_y and Σ d_y·x per channel; Σ d_y·x̂ = r·(Σ d_y·x - μ·Σ d_y).
  const std::vector<double> sums = channel_sums(n, c, [&](int64_t i, int64_t ch, double* acc) {
    nn::sum_and_dot_double(d_y.ptr(i, ch), x.ptr(i, ch), hw, acc[0], acc[1]);
  });
  std::vector<float> ca(size_t(c), 0.0f), cb(size_t(c), 0.0f), cc(size_t(c), 0.0f);  // d_x = ca·d_y + cb·x + cc
  for (int64_t ch = 0; ch < c; ++ch) {
    const float mu = mean[size_t(ch)], r = rstd[size_t(ch)], wc = weight(w, ch);
    const double sum_g = sums[size_t(2 * ch)];
    const double sum_gx = double(r) * (sums[size_t(2 * ch + 1)] - double(mu) * sum_g);
    if (!d_w.empty()) d_w[size_t(ch)] += float(sum_gx);
    if (!d_b.empty()) d_b[size_t(ch)] += float(sum_g);
    // d_x = r·(d_y·w - a - (x - μ)·r·bb)
    const float a = opts.training ? float(sum_g / double(m)) * wc : 0.0f;
    const float bb = opts.training ? float(sum_gx / double(m)) * wc : 0.0f;
    ca[size_t(ch)] = r * wc;
    cb[size_t(ch)] = -r * r * bb;
    cc[size_t(ch)] = r * (mu * r * bb - a);
  }
  nn::parallel_rows(n * c, hw, [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const int64_t ch = pl % c;
      const float *p = x.ptr(pl / c, ch), *g = d_y.ptr(pl / c, ch);
      const float a = ca[size_t(ch)], b = cb[size_t(ch)], k = cc[size_t(ch)];
      float* dx = d_x.ptr(pl / c, ch);
      for (int64_t j = 0; j < hw; ++j) dx[j] = g[j] * a + p[j] * b + k;
    }
  });
}

}  // namespace attnkit
