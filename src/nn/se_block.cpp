// Squeeze-and-Excitation (see se_block.hpp), composed from global_avg_pool and linear.
// Backward of y = x⊙a, a = σ(u), u = z·w2ᵀ + b2, z = relu(v), v = s·w1ᵀ + b1, s = mean_hw(x):
//   d_a = Σ_hw d_y⊙x;  d_u = d_a⊙a⊙(1-a);  d_z = d_u·w2 (and d_w2, d_b2);  d_v = d_z⊙[z > 0];
//   d_s = d_v·w1 (and d_w1, d_b1);  d_x = d_y⊙a + d_s/(H·W).
#include "attnkit/nn/se_block.hpp"

#include <cmath>

#include "attnkit/nn/global_pool.hpp"
#include "attnkit/nn/linear.hpp"
#include "nn_common.hpp"
#include "vision_common.hpp"

namespace attnkit {
namespace nn {

void check_se(const char* fn, ConstView4 x, const SeWeights& w) {
  const int64_t c = x.shape[1], r = w.w1.shape[0];
  check_nchw(x, fn, "x", "[N, C, H, W]", x.shape[0], c, x.shape[2], x.shape[3]);
  check_matrix(w.w1, fn, "w1", "[R, C]", r, c);
  check_matrix(w.w2, fn, "w2", "[C, R]", c, r);
  check_span(w.b1, fn, "b1", "[R]", r, true);
  check_span(w.b2, fn, "b2", "[C]", c, true);
}

// Multiplies each (n, c) plane of x by gate[n, c] into y.
void scale_planes(View4 y, ConstView4 x, ConstView2 gate) {
  const int64_t c = x.shape[1], hw = x.shape[2] * x.shape[3];
  parallel_each_row(x.shape[0] * c, hw, [&](int64_t p) {
    const float a = gate(p / c, p % c);
    const float* in = x.data + p * hw;
    float* out = y.data + p * hw;
    for (int64_t j = 0; j < hw; ++j) out[j] = in[j] * a;
  });
}

// out[n, c] = Σ_hw d_y⊙x, then d_u = out⊙a⊙(1-a) with a = gate (sums in double).
void gate_gradient(View2 d_u, ConstView4 d_y, ConstView4 x, ConstView2 gate) {
  const int64_t c = x.shape[1], hw = x.shape[2] * x.shape[3];
  parallel_each_row(x.shape[0] * c, hw, [&](int64_t p) {
    const double da = dot_double(d_y.data + p * hw, x.data + p * hw, hw);
    const float a = gate(p / c, p % c);
    d_u(p / c, p % c) = float(da) * a * (1.0f - a);
  });
}

}  // namespace nn

void se_block_forward(View4 y, SeCache& cache, ConstView4 x, const SeWeights& w) {
  const char* fn = "se_block_forward";
  nn::check_se(fn, x, w);
  const int64_t n = x.shape[0], c = x.shape[1], r = w.w1.shape[0];
  nn::check_nchw(y, fn, "y", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  check(y.data != x.data || y.numel() == 0, fn, ": y: must not alias x");
  cache.squeeze.resize({n, c});
  cache.hidden.resize({n, r});
  cache.gate.resize({n, c});
  global_avg_pool_forward(cache.squeeze.view(), x);
  linear_forward(cache.hidden.view(), cache.squeeze.view(), w.w1, w.b1);
  for (float& v : cache.hidden.storage()) v = v > 0 ? v : 0.0f;
  linear_forward(cache.gate.view(), cache.hidden.view(), w.w2, w.b2);
  for (float& v : cache.gate.storage()) v = 1.0f / (1.0f + std::exp(-v));
  nn::scale_planes(y, x, cache.gate.view());
}

void se_block_backward(View4 d_x, const SeGrads& g, ConstView4 d_y, ConstView4 x,
                       const SeWeights& w, const SeCache& cache) {
  const char* fn = "se_block_backward";
  nn::check_se(fn, x, w);
  const int64_t n = x.shape[0], c = x.shape[1], r = w.w1.shape[0];
  nn::check_nchw(d_y, fn, "d_y", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  nn::check_nchw(d_x, fn, "d_x", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  check(cache.gate.shape() == std::array<int64_t, 2>{n, c} &&
            cache.hidden.shape() == std::array<int64_t, 2>{n, r},
        fn, ": cache: not filled by se_block_forward for these shapes");
  Tensor<float, 2> d_u({n, c}), d_z({n, r}), d_s({n, c});
  nn::gate_gradient(d_u.view(), d_y, x, cache.gate.view());
  linear_backward(d_z.view(), g.d_w2, g.d_b2, d_u.view(), cache.hidden.view(), w.w2);
  const float* z = cache.hidden.data();
  for (int64_t i = 0; i < n * r; ++i) d_z.data()[i] = z[i] > 0 ? d_z.data()[i] : 0.0f;
  linear_backward(d_s.view(), g.d_w1, g.d_b1, d_z.view(), cache.squeeze.view(), w.w1);
  const int64_t hw = x.shape[2] * x.shape[3];
  const auto gate = cache.gate.view();
  const auto ds = d_s.view();
  nn::parallel_each_row(n * c, hw, [&](int64_t p) {
    const float a = gate(p / c, p % c), s = ds(p / c, p % c) / float(hw);
    const float* gy = d_y.data + p * hw;
    float* dx = d_x.data + p * hw;
    for (int64_t j = 0; j < hw; ++j) dx[j] = gy[j] * a + s;
  });
}

}  // namespace attnkit
