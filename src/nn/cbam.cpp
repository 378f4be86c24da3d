// CBAM (see cbam.hpp), composed from plane pooling, linear and conv2d; passes over the [N, C, H, W]
// tensors are merged where one visit of a plane can serve two of them.
// Backward, from y = x1⊙a_s, a_s = σ(conv(d)), d = [mean_c x1; max_c x1], x1 = x⊙a_c,
// a_c = σ(m(avg) + m(max)):
//   d_as = Σ_c d_y⊙x1;  d_conv = d_as⊙a_s⊙(1-a_s) → conv2d_backward → d_d (and d_ws, d_bs)
//   d_x1 = d_y⊙a_s + d_d[:, 0]/C + d_d[:, 1] at the channel argmax
//   d_u = Σ_hw d_x1⊙x ⊙ a_c⊙(1-a_c), fed to both MLP rows → d_avg, d_max (and d_w1 .. d_b2)
//   d_x = d_x1⊙a_c + d_avg/(H·W) + d_max at the plane argmax
#include "attnkit/nn/cbam.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "attnkit/nn/linear.hpp"
#include "nn_common.hpp"
#include "vision_common.hpp"

namespace attnkit {
namespace {

void check_cbam(const char* fn, ConstView4 x, const CbamWeights& w) {
  const int64_t c = x.shape[1], r = w.w1.shape[0], k = w.ws.shape[2];
  nn::check_nchw(x, fn, "x", "[N, C, H, W]", x.shape[0], c, x.shape[2], x.shape[3]);
  nn::check_matrix(w.w1, fn, "w1", "[R, C]", r, c);
  nn::check_matrix(w.w2, fn, "w2", "[C, R]", c, r);
  nn::check_span(w.b1, fn, "b1", "[R]", r, true);
  nn::check_span(w.b2, fn, "b2", "[C]", c, true);
  check(k >= 1 && k % 2 == 1, fn, ": ws: expected an odd kernel size k, got ", k);
  nn::check_nchw(w.ws, fn, "ws", "[1, 2, k, k]", 1, 2, k, k);
  nn::check_span(w.bs, fn, "bs", "[1]", 1, true);
  check(x.shape[2] * x.shape[3] >= 1 || x.shape[0] * c == 0, fn, ": x: empty planes (H·W = 0)");
  check(x.shape[2] * x.shape[3] <= INT32_MAX, fn, ": x: expected at most 2^31-1 pixels per plane, got ",
        x.shape[2] * x.shape[3]);
}

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

}  // namespace

void cbam_forward(View4 y, CbamCache& cache, ConstView4 x, const CbamWeights& w) {
  const char* fn = "cbam_forward";
  check_cbam(fn, x, w);
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3], hw = h * wd;
  const int64_t r = w.w1.shape[0], k = w.ws.shape[2];
  const bool write_y = nn::present4(y);
  if (write_y) {
    nn::check_nchw(y, fn, "y", "[N, C, H, W]", n, c, h, wd);
    check(y.data != x.data || y.numel() == 0, fn, ": y: must not alias x");
  }
  cache.pooled.resize({2 * n, c});
  cache.max_index.assign(size_t(n * c), 0);
  cache.hidden.resize({2 * n, r});
  cache.channel_gate.resize({n, c});
  cache.x1.resize({n, c, h, wd});
  cache.descriptor.resize({n, 2, h, wd});
  cache.channel_argmax.assign(size_t(n * hw), 0);
  cache.spatial_gate.resize({n, 1, h, wd});
  if (n * c * hw == 0) return;
  // Channel gate: both descriptors of a plane in one visit (the max reads it again from L1, not
  // from memory), then the shared MLP once on the stacked [avg; max] descriptors.
  float* pooled = cache.pooled.data();
  nn::parallel_each_row(n * c, hw, [&](int64_t pl) {
    const float* plane = x.data + pl * hw;
    pooled[pl] = float(nn::sum_double(plane, hw) / double(hw));
    const int64_t best = nn::plane_argmax(plane, hw);
    pooled[n * c + pl] = plane[best];
    cache.max_index[size_t(pl)] = int32_t(best);
  });
  linear_forward(cache.hidden.view(), cache.pooled.view(), w.w1, w.b1);
  for (float& v : cache.hidden.storage()) v = v > 0 ? v : 0.0f;
  Tensor<float, 2> logits({2 * n, c});
  linear_forward(logits.view(), cache.hidden.view(), w.w2, w.b2);
  for (int64_t i = 0; i < n * c; ++i)
    cache.channel_gate.data()[i] = sigmoid(logits.data()[i] + logits.data()[n * c + i]);
  // x1 = x ⊙ a_c and the spatial gate's input [mean_c; max_c] of x1 per pixel (sums in double,
  // first maximum), in one pass over x: each x1 value is used as it is made.
  float* x1 = cache.x1.data();
  parallel_for(n, [&](int64_t b) {  // channel by channel over whole planes (memory order)
    // The running max and argmax live in the task's own buffers until the end: the images'
    // planes are adjacent, and two threads rewriting the line they share for every channel
    // would bounce it between the cores.
    std::vector<double> sum(size_t(hw), 0.0);
    std::vector<float> mx_run(static_cast<size_t>(hw));
    std::vector<int32_t> arg_run(static_cast<size_t>(hw));
    float* mx = mx_run.data();
    int32_t* arg = arg_run.data();
    const float* in = x.data + b * c * hw;
    float* out = x1 + b * c * hw;
    const float* gate = cache.channel_gate.data() + b * c;
    for (int64_t p = 0; p < hw; ++p) {
      out[p] = in[p] * gate[0];
      sum[size_t(p)] = double(out[p]), mx[p] = out[p], arg[p] = 0;
    }
    for (int64_t ch = 1; ch < c; ++ch) {
      const float a = gate[ch];
      const float* v = in + ch * hw;
      float* o = out + ch * hw;
      for (int64_t p = 0; p < hw; ++p) {
        const float e = v[p] * a;
        o[p] = e;
        sum[size_t(p)] += double(e);
        const bool t = nn::later_wins(mx[p], e);  // first maximum, first NaN
        mx[p] = t ? e : mx[p];
        arg[p] = t ? int32_t(ch) : arg[p];
      }
    }
    float* mean = cache.descriptor.data() + (b * 2) * hw;
    for (int64_t p = 0; p < hw; ++p) mean[p] = float(sum[size_t(p)] / double(c));
    std::copy(mx_run.begin(), mx_run.end(), cache.descriptor.data() + (b * 2 + 1) * hw);
    std::copy(arg_run.begin(), arg_run.end(), cache.channel_argmax.data() + b * hw);
  });
  conv2d_forward(cache.spatial_gate.view(), cache.descriptor.view(), w.ws, w.bs,
                 {.stride = 1, .padding = k / 2});
  for (float& v : cache.spatial_gate.storage()) v = sigmoid(v);
  if (!write_y) return;
  const float* as = cache.spatial_gate.data();
  nn::parallel_each_row(n * c, hw, [&](int64_t pl) {
    const float* g = as + (pl / c) * hw;
    for (int64_t j = 0; j < hw; ++j) y.data[pl * hw + j] = x1[pl * hw + j] * g[j];
  });
}

void cbam_residual_relu(View4 o, const CbamCache& cache, ConstView4 shortcut) {
  const char* fn = "cbam_residual_relu";
  const auto& shape = cache.x1.shape();
  const int64_t n = shape[0], c = shape[1], hw = shape[2] * shape[3];
  check(cache.spatial_gate.shape() == std::array<int64_t, 4>{n, 1, shape[2], shape[3]}, fn,
        ": cache: not filled by cbam_forward");
  nn::check_nchw(o, fn, "o", "[N, C, H, W]", n, c, shape[2], shape[3]);
  nn::check_nchw(shortcut, fn, "shortcut", "[N, C, H, W]", n, c, shape[2], shape[3]);
  const float *x1 = cache.x1.data(), *as = cache.spatial_gate.data();
  nn::parallel_each_row(n * c, hw, [&](int64_t pl) {
    const float* g = as + (pl / c) * hw;
    const float* sc = shortcut.data + pl * hw;
    float* out = o.data + pl * hw;
    for (int64_t j = 0; j < hw; ++j) {
      const float y = x1[pl * hw + j] * g[j];
      out[j] = std::max(y + sc[j], 0.0f);
    }
  });
}

void cbam_backward(View4 d_x, const CbamGrads& g, ConstView4 d_y, ConstView4 x,
                   const CbamWeights& w, const CbamCache& cache) {
  const char* fn = "cbam_backward";
  check_cbam(fn, x, w);
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3], hw = h * wd;
  const int64_t r = w.w1.shape[0], k = w.ws.shape[2];
  nn::check_nchw(d_y, fn, "d_y", "[N, C, H, W]", n, c, h, wd);
  nn::check_nchw(d_x, fn, "d_x", "[N, C, H, W]", n, c, h, wd);
  check(cache.x1.shape() == std::array<int64_t, 4>{n, c, h, wd} &&
            cache.hidden.shape() == std::array<int64_t, 2>{2 * n, r},
        fn, ": cache: not filled by cbam_forward for these shapes");
  if (n * c * hw == 0) return;
  const float *x1 = cache.x1.data(), *as = cache.spatial_gate.data();
  // Through the spatial gate.
  Tensor<float, 4> d_conv({n, 1, h, wd}), d_desc({n, 2, h, wd});
  parallel_for(n, [&](int64_t b) {  // Σ_c d_y⊙x1 channel by channel over whole planes
    std::vector<double> sum(size_t(hw), 0.0);
    for (int64_t ch = 0; ch < c; ++ch) {
      const float *g = d_y.data + (b * c + ch) * hw, *v = x1 + (b * c + ch) * hw;
      for (int64_t p = 0; p < hw; ++p) sum[size_t(p)] += double(g[p]) * double(v[p]);
    }
    for (int64_t p = 0; p < hw; ++p) {
      const int64_t q = b * hw + p;
      d_conv.data()[q] = float(sum[size_t(p)]) * as[q] * (1.0f - as[q]);
    }
  });
  conv2d_backward(d_desc.view(), g.d_ws, g.d_bs, d_conv.view(), cache.descriptor.view(), w.ws,
                  {.stride = 1, .padding = k / 2});
  // d_x1 into d_x, and with each plane, while it is in cache, the channel gate's
  // d_u = (Σ_hw d_x1⊙x)·a_c·(1 - a_c) (as nn::gate_gradient).
  const float* dd = d_desc.data();
  Tensor<float, 2> d_logits({2 * n, c}), d_hidden({2 * n, r}), d_pooled({2 * n, c});
  float* d_u = d_logits.data();
  const float* gate = cache.channel_gate.data();
  nn::parallel_each_row(n * c, hw, [&](int64_t pl) {
    const int64_t b = pl / c, ch = pl % c;
    float* dx = d_x.data + pl * hw;
    for (int64_t p = 0; p < hw; ++p) {
      const int64_t q = b * hw + p;
      float v = d_y.data[pl * hw + p] * as[q] + dd[(b * 2) * hw + p] / float(c);
      if (cache.channel_argmax[size_t(q)] == ch) v += dd[(b * 2 + 1) * hw + p];
      dx[p] = v;
    }
    const float a = gate[pl];
    d_u[pl] = float(nn::dot_double(dx, x.data + pl * hw, hw)) * a * (1.0f - a);
  });
  // Through the shared MLP (both rows receive d_u).
  std::copy_n(d_logits.data(), n * c, d_logits.data() + n * c);
  linear_backward(d_hidden.view(), g.d_w2, g.d_b2, d_logits.view(), cache.hidden.view(), w.w2);
  for (int64_t i = 0; i < 2 * n * r; ++i)
    if (!(cache.hidden.data()[i] > 0)) d_hidden.data()[i] = 0.0f;
  linear_backward(d_pooled.view(), g.d_w1, g.d_b1, d_hidden.view(), cache.pooled.view(), w.w1);
  const float *ac = cache.channel_gate.data(), *dp = d_pooled.data();
  nn::parallel_each_row(n * c, hw, [&](int64_t pl) {
    float* dx = d_x.data + pl * hw;
    const float avg = dp[pl] / float(hw);
    for (int64_t p = 0; p < hw; ++p) dx[p] = dx[p] * ac[pl] + avg;
    dx[cache.max_index[size_t(pl)]] += dp[n * c + pl];
  });
}

}  // namespace attnkit
