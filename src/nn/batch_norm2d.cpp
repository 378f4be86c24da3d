// Batch norm over NCHW (see batch_norm2d.hpp); sums in double.
// Backward of y = x̂·w + b, x̂ = (x - μ)·r with batch statistics (g = d_y·w, means over N·H·W):
//   d_x = r·(g - mean(g) - x̂·mean(g·x̂));  with running statistics μ, r are constants: d_x = g·r.
// The per-channel sums read the tensor in memory order: fixed groups of images accumulate their
// own partial sums, added in group order (results never depend on the thread count). The
// statistics take one pass, shifted by a sample of each channel (x[0, c, 0, 0]) so that
// Σ(x - k)² - (Σ(x - k))²/m does not cancel. The parameter sums run before d_x is written, so d_x
// may alias d_y. With opts.relu the backward masks d_y by the forward's pre-activation
// x·scale + shift > 0, recomputed from x with the forward's own scale, shift and fused multiply-add
// (bitwise the same test as y > 0), so no ReLU pass and no read of y are needed.
#include "attnkit/nn/batch_norm2d.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "hwy/highway.h"
#include "nn_common.hpp"
#include "ops/vector_loop.hpp"
#include "vision_common.hpp"

namespace attnkit {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

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


// The forward's per-channel map y = x·scale + shift from the saved mean and rstd. One definition
// (with an explicit fused multiply-add) for forward and backward: the backward's ReLU mask must
// be bitwise the forward's.
struct ChannelAffine {
  float scale, shift;
};
inline ChannelAffine affine_of(float mean, float rstd, std::span<const float> w, std::span<const float> b,
                               int64_t c) {
  const float scale = rstd * nn::weight_or_one(w, c);
  return {scale, std::fma(-mean, scale, nn::bias_or_zero(b, c))};
}

// Calls f(image, channel) for the planes [p0, p1) of an NCHW tensor with c channels.
template <class F>
void for_planes(int64_t p0, int64_t p1, int64_t c, const F& f) {
  for (int64_t pl = p0; pl < p1; ++pl) f(pl / c, pl % c);
}

// Σ g and Σ g·x over one plane of hw values, g = d_y, masked by x·a + sh > 0 when relu (float
// partial sums in vector lanes, added to s and d in double, as nn::shifted_sums_double).
void masked_sum_and_dot(const float* dy, const float* x, int64_t hw, bool relu, float a, float sh,
                        double& s, double& d) {
  const hn::ScalableTag<float> df;
  const auto av = hn::Set(df, a), shv = hn::Set(df, sh), zero = hn::Zero(df);
  auto as = hn::Zero(df), ad = hn::Zero(df);
  vec::for_each_vector(hw, [&](int64_t j, const vec::MF* in) {  // zeros past hw add nothing
    const auto xv = vec::load(x + j, in);
    auto g = vec::load(dy + j, in);
    if (relu) g = hn::IfThenElseZero(hn::Gt(hn::MulAdd(xv, av, shv), zero), g);
    as = hn::Add(as, g);
    ad = hn::MulAdd(g, xv, ad);
  });
  s += double(hn::GetLane(hn::SumOfLanes(df, as)));
  d += double(hn::GetLane(hn::SumOfLanes(df, ad)));
}

}  // namespace

void batch_norm2d_forward(View4 y, std::span<float> mean, std::span<float> rstd,
                          std::span<float> running_mean, std::span<float> running_var,
                          ConstView4 x, std::span<const float> w, std::span<const float> b,
                          const BatchNormOptions& opts) {
  const char* fn = "batch_norm2d_forward";
  const int64_t n = x.shape[0], c = x.shape[1], hw = x.shape[2] * x.shape[3], m = n * hw;
  nn::check_nchw(x, fn, "x", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  const bool write_y = nn::present4(y);
  if (write_y) nn::check_nchw(y, fn, "y", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
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
  std::vector<ChannelAffine> affine(static_cast<size_t>(c));  // y = x·scale + shift per channel
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
    affine[size_t(ch)] = affine_of(mf, r, w, b, ch);
  }
  if (!write_y) return;
  nn::parallel_rows(n * c, hw, [&](int64_t p0, int64_t p1) {
    const hn::ScalableTag<float> df;
    const auto zero = hn::Zero(df);
    for_planes(p0, p1, c, [&](int64_t i, int64_t ch) {
      const float* p = x.ptr(i, ch);
      float* q = y.ptr(i, ch);
      const ChannelAffine& f = affine[size_t(ch)];
      const auto a = hn::Set(df, f.scale), sh = hn::Set(df, f.shift);
      vec::for_each_vector(hw, [&](int64_t j, const vec::MF* in) {
        auto v = hn::MulAdd(vec::load(p + j, in), a, sh);
        if (opts.relu) v = hn::IfThenZeroElse(hn::Lt(v, zero), v);  // max(v, 0), NaN kept
        vec::store(v, q + j, in);
      });
    });
  });
}

void batch_norm2d_scale_shift(std::span<float> scale, std::span<float> shift, std::span<const float> mean,
                              std::span<const float> rstd, std::span<const float> w, std::span<const float> b) {
  const char* fn = "batch_norm2d_scale_shift";
  const int64_t c = int64_t(mean.size());
  nn::check_span(std::span<const float>(scale), fn, "scale", "[C]", c);
  nn::check_span(std::span<const float>(shift), fn, "shift", "[C]", c);
  nn::check_span(rstd, fn, "rstd", "[C]", c);
  nn::check_span(w, fn, "w", "[C]", c, true);
  nn::check_span(b, fn, "b", "[C]", c, true);
  for (int64_t ch = 0; ch < c; ++ch) {
    const ChannelAffine f = affine_of(mean[size_t(ch)], rstd[size_t(ch)], w, b, ch);
    scale[size_t(ch)] = f.scale, shift[size_t(ch)] = f.shift;
  }
}

namespace {

// batch_norm2d_backward with d_y's planes from dy_plane(i, ch) (a pointer valid until the next
// call on the same thread); the arguments are checked by the callers.
template <class DyPlane>
void backward_planes(View4 d_x, std::span<float> d_w, std::span<float> d_b, const DyPlane& dy_plane,
                     ConstView4 x, std::span<const float> w, std::span<const float> b,
                     std::span<const float> mean, std::span<const float> rstd, const BatchNormOptions& opts) {
  const int64_t n = x.shape[0], c = x.shape[1], hw = x.shape[2] * x.shape[3], m = n * hw;
  // The ReLU's mask: x·scale + shift > 0 with the forward's scale and shift.
  std::vector<ChannelAffine> pre(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch)
    pre[size_t(ch)] = affine_of(mean[size_t(ch)], rstd[size_t(ch)], w, b, ch);
  // Σ g and Σ g·x per channel (g: d_y, masked); Σ g·x̂ = r·(Σ g·x - μ·Σ g).
  const std::vector<double> sums = channel_sums(n, c, [&](int64_t i, int64_t ch, double* acc) {
    const ChannelAffine& f = pre[size_t(ch)];
    masked_sum_and_dot(dy_plane(i, ch), x.ptr(i, ch), hw, opts.relu, f.scale, f.shift, acc[0], acc[1]);
  });
  std::vector<float> ca(size_t(c), 0.0f), cb(size_t(c), 0.0f), cc(size_t(c), 0.0f);  // d_x = ca·d_y + cb·x + cc
  for (int64_t ch = 0; ch < c; ++ch) {
    const float mu = mean[size_t(ch)], r = rstd[size_t(ch)], wc = nn::weight_or_one(w, ch);
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
    const hn::ScalableTag<float> df;
    const auto zero = hn::Zero(df);
    for_planes(p0, p1, c, [&](int64_t i, int64_t ch) {
      const float *p = x.ptr(i, ch), *g = dy_plane(i, ch);
      float* dx = d_x.ptr(i, ch);
      const ChannelAffine& f = pre[size_t(ch)];
      const auto a = hn::Set(df, ca[size_t(ch)]), bx = hn::Set(df, cb[size_t(ch)]),
                 k = hn::Set(df, cc[size_t(ch)]), ms = hn::Set(df, f.scale), mb = hn::Set(df, f.shift);
      vec::for_each_vector(hw, [&](int64_t j, const vec::MF* in) {
        const auto xv = vec::load(p + j, in);
        auto gv = vec::load(g + j, in);
        if (opts.relu) gv = hn::IfThenElseZero(hn::Gt(hn::MulAdd(xv, ms, mb), zero), gv);
        vec::store(hn::MulAdd(gv, a, hn::MulAdd(xv, bx, k)), dx + j, in);
      });
    });
  });
}

void check_backward(const char* fn, View4 d_x, std::span<float> d_w, std::span<float> d_b, ConstView4 x,
                    std::span<const float> w, std::span<const float> b, std::span<const float> mean,
                    std::span<const float> rstd, const BatchNormOptions& opts) {
  const int64_t n = x.shape[0], c = x.shape[1];
  nn::check_nchw(x, fn, "x", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  nn::check_nchw(d_x, fn, "d_x", "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  check_params(fn, c, w, b, opts);
  nn::check_span(mean, fn, "mean", "[C]", c);
  nn::check_span(rstd, fn, "rstd", "[C]", c);
  nn::check_span(std::span<const float>(d_b), fn, "d_b", "[C]", c, true);
  nn::check_norm_grads(fn, w, d_w, {}, {});
}

}  // namespace

void batch_norm2d_backward(View4 d_x, std::span<float> d_w, std::span<float> d_b, ConstView4 d_y,
                           ConstView4 x, std::span<const float> w, std::span<const float> b,
                           std::span<const float> mean, std::span<const float> rstd,
                           const BatchNormOptions& opts) {
  const char* fn = "batch_norm2d_backward";
  check_backward(fn, d_x, d_w, d_b, x, w, b, mean, rstd, opts);
  nn::check_nchw(d_y, fn, "d_y", "[N, C, H, W]", x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
  backward_planes(d_x, d_w, d_b, [&](int64_t i, int64_t ch) { return d_y.ptr(i, ch); }, x, w, b, mean, rstd, opts);
}

void batch_norm2d_max_pool_backward(View4 d_x, std::span<float> d_w, std::span<float> d_b, ConstView4 d_pooled,
                                    std::span<const int32_t> argmax, ConstView4 x, std::span<const float> w,
                                    std::span<const float> b, std::span<const float> mean,
                                    std::span<const float> rstd, const BatchNormOptions& opts) {
  const char* fn = "batch_norm2d_max_pool_backward";
  check_backward(fn, d_x, d_w, d_b, x, w, b, mean, rstd, opts);
  const int64_t n = x.shape[0], c = x.shape[1], hw = x.shape[2] * x.shape[3];
  const int64_t oh = d_pooled.shape[2], ow = d_pooled.shape[3], ohw = oh * ow;
  nn::check_nchw(d_pooled, fn, "d_pooled", "[N, C, OH, OW]", n, c, oh, ow);
  nn::check_span(argmax, fn, "argmax", "[N·C·OH·OW]", n * c * ohw);
  nn::check_argmax(fn, argmax, hw);
  const auto begin = [](const float* p) { return reinterpret_cast<uintptr_t>(p); };
  const bool disjoint = d_x.numel() == 0 || d_pooled.numel() == 0 ||
                        begin(d_x.data + d_x.numel()) <= begin(d_pooled.data) ||
                        begin(d_pooled.data + d_pooled.numel()) <= begin(d_x.data);
  check(disjoint, fn, ": d_x: must not overlap d_pooled");
  backward_planes(d_x, d_w, d_b, [&](int64_t i, int64_t ch) {
    // max_pool2d_backward's plane: zeros, then each window's gradient added at its argmax.
    thread_local std::vector<float> plane;
    if (int64_t(plane.size()) < hw) plane.resize(size_t(hw));
    std::fill_n(plane.data(), hw, 0.0f);
    const float* g = d_pooled.ptr(i, ch);
    const int32_t* am = argmax.data() + (i * c + ch) * ohw;
    for (int64_t o = 0; o < ohw; ++o) plane[size_t(am[o])] += g[o];
    return static_cast<const float*>(plane.data());
  }, x, w, b, mean, rstd, opts);
}

}  // namespace attnkit
