// LayerNorm and RMSNorm reference: scalar loops in double, the executable spec of norm.hpp.
//   LayerNorm: μ = mean(x), var = mean((x - μ)²), r = 1/sqrt(var + eps), x̂ = (x - μ)·r,
//              y = x̂·w + b;  with g = d_y·w: d_x = r·(g - mean(g) - x̂·mean(g·x̂)),
//              d_w += Σ_t d_y·x̂, d_b += Σ_t d_y.
//   RMSNorm:   r = 1/sqrt(mean(x²) + eps), y = x·r·w;  d_x = r·g - x·r³·mean(g·x),
//              d_w += Σ_t d_y·x·r.
// The backward uses the forward's saved mean and rstd (as the fast path does); an optional
// d_residual is added to d_x before its one rounding.
#include <cmath>
#include <vector>

#include "attnkit/nn/norm.hpp"
#include "nn_common.hpp"

namespace attnkit {
namespace {

// d_w[c] += Σ_t d_y[t, c]·x̂[t, c] and d_b[c] += Σ_t d_y[t, c], x̂ given by xhat(t, c).
template <class XHat>
void param_grads(std::span<float> d_w, std::span<float> d_b, ConstView2 d_y, XHat xhat) {
  for (int64_t c = 0; c < d_y.shape[1]; ++c) {
    double acc_w = 0, acc_b = 0;
    for (int64_t t = 0; t < d_y.shape[0]; ++t) {
      acc_w += double(d_y(t, c)) * xhat(t, c);
      acc_b += double(d_y(t, c));
    }
    if (!d_w.empty()) d_w[size_t(c)] = float(double(d_w[size_t(c)]) + acc_w);
    if (!d_b.empty()) d_b[size_t(c)] = float(double(d_b[size_t(c)]) + acc_b);
  }
}

// d_residual[t, j] in double, or 0 without a d_residual.
double residual_at(ConstView2 d_residual, int64_t t, int64_t j) {
  return nn::present(d_residual) ? double(d_residual(t, j)) : 0.0;
}

}  // namespace

void layer_norm_forward_reference(View2 y, std::span<float> mean, std::span<float> rstd,
                                  ConstView2 x, std::span<const float> w, std::span<const float> b,
                                  float eps) {
  const char* fn = "layer_norm_forward_reference";
  nn::check_norm(fn, y, "y", x, w, b);
  nn::check_span(mean, fn, "mean", "[T]", x.shape[0]);
  nn::check_span(rstd, fn, "rstd", "[T]", x.shape[0]);
  nn::check_eps(fn, eps);
  const int64_t c = x.shape[1];
  std::vector<double> row(static_cast<size_t>(c));
  for (int64_t t = 0; t < x.shape[0]; ++t) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < c; ++j) mu += (row[size_t(j)] = double(x(t, j)));
    mu = c ? mu / double(c) : 0.0;
    for (int64_t j = 0; j < c; ++j) var += (row[size_t(j)] - mu) * (row[size_t(j)] - mu);
    var = c ? var / double(c) : 0.0;
    const double r = 1.0 / std::sqrt(var + double(eps));
    mean[size_t(t)] = float(mu);
    rstd[size_t(t)] = float(r);
    for (int64_t j = 0; j < c; ++j)
      y(t, j) = float((row[size_t(j)] - mu) * r * double(nn::weight_or_one(w, j)) +
                      double(nn::bias_or_zero(b, j)));
  }
}

void layer_norm_backward_reference(View2 d_x, std::span<float> d_w, std::span<float> d_b,
                                   ConstView2 d_y, ConstView2 x, std::span<const float> w,
                                   std::span<const float> mean, std::span<const float> rstd,
                                   ConstView2 d_residual) {
  const char* fn = "layer_norm_backward_reference";
  nn::check_norm_backward(fn, d_x, d_w, d_b, d_y, x, w, mean, rstd, d_residual, true);
  auto xhat = [&](int64_t t, int64_t c) {
    return (double(x(t, c)) - double(mean[size_t(t)])) * double(rstd[size_t(t)]);
  };
  param_grads(d_w, d_b, d_y, xhat);  // before d_x, which may alias d_y
  const int64_t c = x.shape[1];
  std::vector<double> g(static_cast<size_t>(c));
  for (int64_t t = 0; t < x.shape[0]; ++t) {
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < c; ++j) {
      g[size_t(j)] = double(d_y(t, j)) * double(nn::weight_or_one(w, j));
      sum_g += g[size_t(j)];
      sum_gx += g[size_t(j)] * xhat(t, j);
    }
    const double a = c ? sum_g / double(c) : 0.0, bb = c ? sum_gx / double(c) : 0.0;
    for (int64_t j = 0; j < c; ++j)
      d_x(t, j) = float(residual_at(d_residual, t, j) +
                        double(rstd[size_t(t)]) * (g[size_t(j)] - a - xhat(t, j) * bb));
  }
}

void rms_norm_forward_reference(View2 y, std::span<float> rstd, ConstView2 x,
                                std::span<const float> w, float eps) {
  const char* fn = "rms_norm_forward_reference";
  nn::check_norm(fn, y, "y", x, w, {});
  nn::check_span(rstd, fn, "rstd", "[T]", x.shape[0]);
  nn::check_eps(fn, eps);
  const int64_t c = x.shape[1];
  std::vector<double> row(static_cast<size_t>(c));
  for (int64_t t = 0; t < x.shape[0]; ++t) {
    double ms = 0;
    for (int64_t j = 0; j < c; ++j) {
      row[size_t(j)] = double(x(t, j));
      ms += row[size_t(j)] * row[size_t(j)];
    }
    const double r = 1.0 / std::sqrt((c ? ms / double(c) : 0.0) + double(eps));
    rstd[size_t(t)] = float(r);
    for (int64_t j = 0; j < c; ++j)
      y(t, j) = float(row[size_t(j)] * r * double(nn::weight_or_one(w, j)));
  }
}

void rms_norm_backward_reference(View2 d_x, std::span<float> d_w, ConstView2 d_y, ConstView2 x,
                                 std::span<const float> w, std::span<const float> rstd,
                                 ConstView2 d_residual) {
  const char* fn = "rms_norm_backward_reference";
  nn::check_norm_backward(fn, d_x, d_w, {}, d_y, x, w, {}, rstd, d_residual, false);
  param_grads(d_w, {}, d_y,
              [&](int64_t t, int64_t c) { return double(x(t, c)) * double(rstd[size_t(t)]); });
  const int64_t c = x.shape[1];
  std::vector<double> g(static_cast<size_t>(c));
  for (int64_t t = 0; t < x.shape[0]; ++t) {
    const double r = double(rstd[size_t(t)]);
    double sum_gx = 0;
    for (int64_t j = 0; j < c; ++j) {
      g[size_t(j)] = double(d_y(t, j)) * double(nn::weight_or_one(w, j));
      sum_gx += g[size_t(j)] * double(x(t, j));
    }
    const double k = c ? sum_gx / double(c) * r * r * r : 0.0;
    for (int64_t j = 0; j < c; ++j)
      d_x(t, j) = float(residual_at(d_residual, t, j) + r * g[size_t(j)] - double(x(t, j)) * k);
  }
}

}  // namespace attnkit
