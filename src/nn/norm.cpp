// LayerNorm and RMSNorm fast path: one task per block of rows for the statistics and d_x (row
// sums in double, elementwise work in float), one task per block of channels for the parameter
// gradients (tokens summed in order, in double; many tokens over few channels: fixed token chunks). PyTorch: F.layer_norm(x, (C,), w, b, eps);
// x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.
// Backward of y = x̂·w + b with x̂ = (x - μ)·r: with g = d_y·w,
//   d_x = r·(g - mean(g) - x̂·mean(g·x̂))            (LayerNorm: μ and r depend on x)
//   d_x = r·(g - x·r²·mean(g·x))                      (RMSNorm: y = x·r·w, r = (mean(x²)+eps)^-½)
// The parameter pass runs before the d_x pass so that d_x may alias d_y. An optional d_residual is
// added to d_x in the same pass (a pre-norm block's skip path), so the models need no separate add.
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

void check_residual(const char* fn, ConstView2 d_residual, ConstView2 x) {
  if (present(d_residual)) check_matrix(d_residual, fn, "d_residual", "[T, C]", x.shape[0], x.shape[1]);
}

}  // namespace nn

namespace {


// dx[j] = res[j] + term(j) for j < c, or term(j) without a residual row (res null); two loops, so
// each vectorises without a test per element.
template <class Term>
void write_input_gradient(float* dx, const float* res, int64_t c, const Term& term) {
  if (res) {
    for (int64_t j = 0; j < c; ++j) dx[j] = res[j] + term(j);
    return;
  }
  for (int64_t j = 0; j < c; ++j) dx[j] = term(j);
}

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

namespace {

// d_w[C] += Σ_t d_y·x̂ and d_b[C] += Σ_t d_y, in double. Few channels over many tokens (a ViT or
// BERT layer over a whole batch) would give channel blocks too few to share among the threads,
// so the tokens are split into fixed chunks whose partial sums are added in chunk order; fewer
// tokens use one task per block of channels. Both depend only on (T, C): bitwise identical for
// any thread count.
void layer_norm_param_grads(std::span<float> d_w, std::span<float> d_b, ConstView2 d_y,
                            ConstView2 x, std::span<const float> mean,
                            std::span<const float> rstd) {
  constexpr int64_t kMinChunk = 512, kMaxChunks = 16;
  const int64_t tokens = x.shape[0], c = x.shape[1];
  auto accumulate = [&](int64_t t0, int64_t t1, int64_t c0, int64_t c1, double* acc_w,
                        double* acc_b) {
    for (int64_t t = t0; t < t1; ++t) {
      const float *xr = x.ptr(t), *g = d_y.ptr(t);
      const float m = mean[size_t(t)], r = rstd[size_t(t)];
      for (int64_t j = c0; j < c1; ++j) {
        acc_w[j - c0] += double(g[j]) * double((xr[j] - m) * r);
        acc_b[j - c0] += double(g[j]);
      }
    }
  };
  const int64_t chunks = std::min(kMaxChunks, tokens / kMinChunk);
  if (chunks < 2 || c > 4 * nn::kColumnBlock) {
    nn::parallel_columns(c, [&](int64_t c0, int64_t c1) {
      std::vector<double> acc_w(size_t(c1 - c0), 0.0), acc_b(size_t(c1 - c0), 0.0);
      accumulate(0, tokens, c0, c1, acc_w.data(), acc_b.data());
      for (int64_t j = c0; j < c1; ++j) {
        if (!d_w.empty()) d_w[size_t(j)] += float(acc_w[size_t(j - c0)]);
        if (!d_b.empty()) d_b[size_t(j)] += float(acc_b[size_t(j - c0)]);
      }
    });
    return;
  }
  const int64_t per = (tokens + chunks - 1) / chunks;
  std::vector<double> part(size_t(2 * chunks * c), 0.0);  // [chunk][w | b][C]
  parallel_for(chunks, [&](int64_t k) {
    double* acc = part.data() + 2 * k * c;
    accumulate(k * per, std::min(tokens, (k + 1) * per), 0, c, acc, acc + c);
  });
  for (int64_t j = 0; j < c; ++j) {
    double sw = 0, sb = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      sw += part[size_t(2 * k * c + j)];
      sb += part[size_t((2 * k + 1) * c + j)];
    }
    if (!d_w.empty()) d_w[size_t(j)] += float(sw);
    if (!d_b.empty()) d_b[size_t(j)] += float(sb);
  }
}

}  // namespace

void layer_norm_backward(View2 d_x, std::span<float> d_w, std::span<float> d_b, ConstView2 d_y,
                         ConstView2 x, std::span<const float> w, std::span<const float> mean,
                         std::span<const float> rstd, ConstView2 d_residual) {
  const char* fn = "layer_norm_backward";
  nn::check_norm(fn, d_x, "d_x", x, w, {});
  nn::check_matrix(d_y, fn, "d_y", "[T, C]", x.shape[0], x.shape[1]);
  nn::check_span(mean, fn, "mean", "[T]", x.shape[0]);
  nn::check_span(rstd, fn, "rstd", "[T]", x.shape[0]);
  nn::check_span(std::span<const float>(d_b), fn, "d_b", "[C]", x.shape[1], true);
  nn::check_norm_grads(fn, w, d_w, {}, {});
  nn::check_residual(fn, d_residual, x);
  const int64_t tokens = x.shape[0], c = x.shape[1];
  if (!d_w.empty() || !d_b.empty()) layer_norm_param_grads(d_w, d_b, d_y, x, mean, rstd);
  nn::parallel_each_row(tokens, c, [&](int64_t t) {
    const float *xr = x.ptr(t), *g = d_y.ptr(t);
    const float m = mean[size_t(t)], r = rstd[size_t(t)];
    // Eight independent partial sums (in double) per row, so the loop vectorises.
    double part_g[8] = {}, part_gx[8] = {};
    int64_t j = 0;
    for (; j + 8 <= c; j += 8)
      for (int l = 0; l < 8; ++l) {
        const double gw = double(g[j + l]) * double(nn::weight_or_one(w, j + l));
        part_g[l] += gw;
        part_gx[l] += gw * double((xr[j + l] - m) * r);
      }
    double sum_g = 0, sum_gx = 0;
    for (; j < c; ++j) {
      const double gw = double(g[j]) * double(nn::weight_or_one(w, j));
      sum_g += gw;
      sum_gx += gw * double((xr[j] - m) * r);
    }
    for (int l = 0; l < 8; ++l) sum_g += part_g[l], sum_gx += part_gx[l];
    const float a = c ? float(sum_g / double(c)) : 0.0f;
    const float bb = c ? float(sum_gx / double(c)) : 0.0f;
    const float* res = nn::present(d_residual) ? d_residual.ptr(t) : nullptr;
    write_input_gradient(d_x.ptr(t), res, c, [&](int64_t j) {
      return r * (g[j] * nn::weight_or_one(w, j) - a - (xr[j] - m) * r * bb);
    });
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

void rms_norm_backward(View2 d_x, std::span<float> d_w, ConstView2 d_y, ConstView2 x,
                       std::span<const float> w, std::span<const float> rstd, ConstView2 d_residual) {
  const char* fn = "rms_norm_backward";
  nn::check_norm(fn, d_x, "d_x", x, w, {});
  nn::check_matrix(d_y, fn, "d_y", "[T, C]", x.shape[0], x.shape[1]);
  nn::check_span(rstd, fn, "rstd", "[T]", x.shape[0]);
  nn::check_norm_grads(fn, w, d_w, {}, {});
  nn::check_residual(fn, d_residual, x);
  const int64_t tokens = x.shape[0], c = x.shape[1];
  if (!d_w.empty())
    nn::parallel_columns(c, [&](int64_t c0, int64_t c1) {
      std::vector<double> acc(size_t(c1 - c0), 0.0);
      for (int64_t t = 0; t < tokens; ++t) {
        const float *xr = x.ptr(t), *g = d_y.ptr(t);
        const float r = rstd[size_t(t)];
        for (int64_t j = c0; j < c1; ++j) acc[size_t(j - c0)] += double(g[j]) * double(xr[j] * r);
      }
      for (int64_t j = c0; j < c1; ++j) d_w[size_t(j)] += float(acc[size_t(j - c0)]);
    });
  nn::parallel_each_row(tokens, c, [&](int64_t t) {
    const float *xr = x.ptr(t), *g = d_y.ptr(t);
    const float r = rstd[size_t(t)];
    // Eight independent partial sums (in double) per row, so the loop vectorises.
    double part[8] = {};
    int64_t j = 0;
    for (; j + 8 <= c; j += 8)
      for (int l = 0; l < 8; ++l)
        part[l] += double(g[j + l]) * double(nn::weight_or_one(w, j + l)) * double(xr[j + l]);
    double sum_gx = 0;
    for (; j < c; ++j) sum_gx += double(g[j]) * double(nn::weight_or_one(w, j)) * double(xr[j]);
    for (int l = 0; l < 8; ++l) sum_gx += part[l];
    const float k = c ? float(sum_gx / double(c) * double(r) * double(r)) : 0.0f;
    const float* res = nn::present(d_residual) ? d_residual.ptr(t) : nullptr;
    write_input_gradient(d_x.ptr(t), res, c,
                         [&](int64_t e) { return r * (g[e] * nn::weight_or_one(w, e) - xr[e] * k); });
  });
}

}  // namespace attnkit
