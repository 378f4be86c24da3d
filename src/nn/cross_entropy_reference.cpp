// Cross-entropy reference: the formulas of cross_entropy.hpp in double, one token at a time, with
// every logit formed explicitly (z_v = Σ_c h_c·W[v, c] + b_v for the fused form):
//   lse = m + log Σ_v exp(z_v - m), m = max_v z_v;  loss = lse - z[target];  mean over valid tokens
//   dz_v = (exp(z_v - lse) - [v = target])·d_loss/n_valid;  d_h = Σ_v dz_v·W[v];
//   d_W[v] += Σ_t dz_tv·h_t;  d_b[v] += Σ_t dz_tv.
// The backward uses the forward's lse (as the fast path does).
#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/nn/cross_entropy.hpp"
#include "attnkit/nn/linear.hpp"
#include "nn_common.hpp"

namespace attnkit {
namespace {

// Per-token loss and lse from a row of double logits.
void row_loss(const std::vector<double>& z, int32_t target, float* loss, float* lse) {
  const double m = *std::max_element(z.begin(), z.end());
  double s = 0;
  for (double x : z) s += std::exp(x - m);
  const double l = m + std::log(s);
  *lse = float(l);
  *loss = float(l - z[size_t(target)]);
}

// Logits of token t for the fused form, in double.
void fused_logits(ConstView2 h, ConstView2 w, std::span<const float> b, int64_t t,
                  std::vector<double>& z) {
  for (int64_t v = 0; v < w.shape[0]; ++v) {
    double acc = b.empty() ? 0.0 : double(b[size_t(v)]);
    for (int64_t c = 0; c < h.shape[1]; ++c) acc += double(h(t, c)) * double(w(v, c));
    z[size_t(v)] = acc;
  }
}

double grad_scale(std::span<const int32_t> targets, float d_loss) {
  const size_t n = nn::valid_rows(targets).size();
  return n ? double(d_loss) / double(n) : 0.0;
}

}  // namespace

float cross_entropy_forward_reference(std::span<float> losses, std::span<float> lse,
                                      ConstView2 logits, std::span<const int32_t> targets) {
  const char* fn = "cross_entropy_forward_reference";
  nn::check_cross_entropy(fn, logits, targets);
  nn::check_span(losses, fn, "losses", "[T]", int64_t(targets.size()));
  nn::check_span(lse, fn, "lse", "[T]", int64_t(targets.size()));
  std::vector<double> z(static_cast<size_t>(logits.shape[1]));
  for (size_t t = 0; t < targets.size(); ++t) {
    losses[t] = lse[t] = 0.0f;
    if (targets[t] < 0) continue;
    for (int64_t v = 0; v < logits.shape[1]; ++v) z[size_t(v)] = double(logits(int64_t(t), v));
    row_loss(z, targets[t], &losses[t], &lse[t]);
  }
  return nn::mean_loss(losses, int64_t(nn::valid_rows(targets).size()));
}

void cross_entropy_backward_reference(View2 d_logits, ConstView2 logits,
                                      std::span<const int32_t> targets, std::span<const float> lse,
                                      float d_loss) {
  const char* fn = "cross_entropy_backward_reference";
  nn::check_cross_entropy(fn, logits, targets);
  nn::check_matrix(d_logits, fn, "d_logits", "[T, V]", logits.shape[0], logits.shape[1]);
  nn::check_span(lse, fn, "lse", "[T]", int64_t(targets.size()));
  const double scale = grad_scale(targets, d_loss);
  for (size_t t = 0; t < targets.size(); ++t)
    for (int64_t v = 0; v < logits.shape[1]; ++v) {
      const int64_t ti = int64_t(t);
      if (targets[t] < 0) {
        d_logits(ti, v) = 0.0f;
        continue;
      }
      const double p = std::exp(double(logits(ti, v)) - double(lse[t]));
      d_logits(ti, v) = float((p - (v == targets[t] ? 1.0 : 0.0)) * scale);
    }
}

float linear_cross_entropy_forward_reference(std::span<float> losses, std::span<float> lse,
                                             ConstView2 h, ConstView2 w, std::span<const float> b,
                                             std::span<const int32_t> targets) {
  const char* fn = "linear_cross_entropy_forward_reference";
  nn::check_linear_cross_entropy(fn, h, w, b, targets);
  nn::check_span(losses, fn, "losses", "[T]", int64_t(targets.size()));
  nn::check_span(lse, fn, "lse", "[T]", int64_t(targets.size()));
  std::vector<double> z(static_cast<size_t>(w.shape[0]));
  for (size_t t = 0; t < targets.size(); ++t) {
    losses[t] = lse[t] = 0.0f;
    if (targets[t] < 0) continue;
    fused_logits(h, w, b, int64_t(t), z);
    row_loss(z, targets[t], &losses[t], &lse[t]);
  }
  return nn::mean_loss(losses, int64_t(nn::valid_rows(targets).size()));
}

void linear_cross_entropy_backward_reference(View2 d_h, View2 d_w, std::span<float> d_b,
                                             ConstView2 h, ConstView2 w, std::span<const float> b,
                                             std::span<const int32_t> targets,
                                             std::span<const float> lse, float d_loss) {
  const char* fn = "linear_cross_entropy_backward_reference";
  nn::check_linear_cross_entropy(fn, h, w, b, targets);
  nn::check_matrix(d_h, fn, "d_h", "[T, C]", h.shape[0], h.shape[1]);
  if (nn::present(d_w)) nn::check_matrix(d_w, fn, "d_w", "[V, C]", w.shape[0], w.shape[1]);
  check(!(b.empty() && !d_b.empty()), fn, ": d_b: given but the head has no bias (b empty)");
  nn::check_span(std::span<const float>(d_b), fn, "d_b", "[V]", w.shape[0], true);
  nn::check_span(lse, fn, "lse", "[T]", int64_t(targets.size()));
  const int64_t tokens = h.shape[0], c = h.shape[1], v = w.shape[0];
  const double scale = grad_scale(targets, d_loss);
  // dz[t, v] for every token (0 on ignored rows), then the three sums in double.
  std::vector<double> dz(size_t(tokens * v), 0.0), z(static_cast<size_t>(v));
  for (int64_t t = 0; t < tokens; ++t) {
    if (targets[size_t(t)] < 0) continue;
    fused_logits(h, w, b, t, z);
    for (int64_t j = 0; j < v; ++j)
      dz[size_t(t * v + j)] = (std::exp(z[size_t(j)] - double(lse[size_t(t)])) -
                               (j == targets[size_t(t)] ? 1.0 : 0.0)) *
                              scale;
  }
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t k = 0; k < c; ++k) {
      double acc = 0;
      for (int64_t j = 0; j < v; ++j) acc += dz[size_t(t * v + j)] * double(w(j, k));
      d_h(t, k) = float(acc);
    }
  for (int64_t j = 0; j < v; ++j) {
    for (int64_t k = 0; k < c && nn::present(d_w); ++k) {
      double acc = 0;
      for (int64_t t = 0; t < tokens; ++t) acc += dz[size_t(t * v + j)] * double(h(t, k));
      d_w(j, k) = float(double(d_w(j, k)) + acc);
    }
    if (!d_b.empty()) {
      double acc = 0;
      for (int64_t t = 0; t < tokens; ++t) acc += dz[size_t(t * v + j)];
      d_b[size_t(j)] = float(double(d_b[size_t(j)]) + acc);
    }
  }
}

void logits_forward_reference(View2 logits, ConstView2 h, ConstView2 w, std::span<const float> b) {
  const char* fn = "logits_forward_reference";
  nn::check_matrix(h, fn, "h", "[T, C]", h.shape[0], h.shape[1]);
  nn::check_matrix(w, fn, "w", "[V, C]", w.shape[0], h.shape[1]);
  nn::check_matrix(logits, fn, "logits", "[T, V]", h.shape[0], w.shape[0]);
  nn::check_span(b, fn, "b", "[V]", w.shape[0], true);
  linear_forward_reference(logits, h, w, b);
}

}  // namespace attnkit
