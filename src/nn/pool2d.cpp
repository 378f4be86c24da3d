// Max and average pooling (see pool2d.hpp), one task per block of (n, c) planes; the max pool
// optionally of a per-channel affine map + ReLU of x made plane by plane (a batch norm's output).
// Backward of y = max(window): d_x[argmax] += d_y. Backward of y = Σ window / d: d_x += d_y / d
// on every in-image pixel of the window.
#include "attnkit/nn/pool2d.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <climits>
#include <cmath>
#include <vector>

#include "hwy/highway.h"
#include "nn_common.hpp"
#include "ops/vector_loop.hpp"
#include "vision_common.hpp"

namespace attnkit {
namespace {

struct PoolGeometry {
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0, k = 0, s = 0, p = 0;
};

// The geometry for an input of shape [N, C, H, W] (checked by the caller), y_like checked.
PoolGeometry check_pool_shape(const char* fn, const std::array<int64_t, 4>& x_shape, ConstView4 y_like,
                              const char* y_name, const Pool2dOptions& opts) {
  nn::check_positive(fn, "kernel", opts.kernel);
  check(opts.stride >= 0, fn, ": stride: expected >= 1 (or 0 for kernel), got ", opts.stride);
  check(opts.padding >= 0 && opts.padding <= opts.kernel / 2, fn, ": padding: expected 0 <= 2·padding <= kernel = ",
        opts.kernel, ", got ", opts.padding);
  PoolGeometry g;
  const int64_t n = x_shape[0], c = x_shape[1];
  g.planes = n * c, g.h = x_shape[2], g.w = x_shape[3];
  g.k = opts.kernel, g.s = opts.stride ? opts.stride : opts.kernel, g.p = opts.padding;
  nn::check_kernel_fits(fn, g.k, g.k, g.h, g.w, g.p);
  const auto out = [&](int64_t in) { const int64_t sp = in + 2 * g.p - g.k; return sp < 0 ? 0 : sp / g.s + 1; };
  g.oh = out(g.h), g.ow = out(g.w);
  nn::check_nchw(y_like, fn, y_name, "[N, C, OH, OW]", n, c, g.oh, g.ow);
  return g;
}

PoolGeometry check_pool(const char* fn, ConstView4 x_like, const char* x_name, ConstView4 y_like,
                        const char* y_name, const Pool2dOptions& opts) {
  nn::check_nchw(x_like, fn, x_name, "[N, C, H, W]", x_like.shape[0], x_like.shape[1], x_like.shape[2],
                 x_like.shape[3]);
  return check_pool_shape(fn, x_like.shape, y_like, y_name, opts);
}

// Number of in-image pixels of the window at output (i, j), or k² with count_include_pad.
float divisor(const PoolGeometry& g, int64_t i, int64_t j, bool include_pad) {
  if (include_pad) return float(g.k * g.k);
  const int64_t h0 = std::max<int64_t>(i * g.s - g.p, 0), h1 = std::min(i * g.s - g.p + g.k, g.h);
  const int64_t w0 = std::max<int64_t>(j * g.s - g.p, 0), w1 = std::min(j * g.s - g.p + g.k, g.w);
  return float((h1 - h0) * (w1 - w0));
}

}  // namespace

namespace hn = hwy::HWY_NAMESPACE;
namespace {

// 2×2, stride-2 max pool of one plane [H, W] (W even; rows past 2·OH are unused) into
// out[OH, OW = W/2] and the window's winning flat index am, in window order (first maximum,
// first NaN). Two vector passes over contiguous data, since rows are often shorter than a
// vector: the pairs of each row (whole plane at once, W even so pairs never straddle rows),
// then the two rows' pair winners.
void max_pool2x2_plane(const float* in, int64_t oh, int64_t w, float* out, int32_t* am) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t lanes = int64_t(hn::Lanes(df)), ow = w / 2, pairs = oh * w;  // 2·OH rows of OW pairs
  thread_local std::vector<float> hv;
  thread_local std::vector<int32_t> hi;
  if (int64_t(hv.size()) < pairs) hv.resize(size_t(pairs)), hi.resize(size_t(pairs));
  int64_t k = 0;
  for (; k + lanes <= pairs; k += lanes) {
    hn::Vec<decltype(df)> a, b;
    hn::LoadInterleaved2(df, in + 2 * k, a, b);
    const auto t = nn::later_wins(df, a, b);
    hn::StoreU(hn::IfThenElse(t, b, a), df, hv.data() + k);
    const auto idx = hn::Add(hn::Iota(di, int32_t(2 * k)), hn::Iota(di, 0));  // 2k, 2k + 2, ...
    hn::StoreU(hn::Add(idx, hn::IfThenElseZero(hn::RebindMask(di, t), hn::Set(di, 1))), di, hi.data() + k);
  }
  for (; k < pairs; ++k) {
    const float a = in[2 * k], b = in[2 * k + 1];
    const bool t = nn::later_wins(a, b);
    hv[size_t(k)] = t ? b : a;
    hi[size_t(k)] = int32_t(2 * k + (t ? 1 : 0));
  }
  for (int64_t i = 0; i < oh; ++i) {
    const float *top = hv.data() + 2 * i * ow, *bot = top + ow;
    const int32_t *itop = hi.data() + 2 * i * ow, *ibot = itop + ow;
    for (int64_t j = 0; j < ow; j += lanes) {
      const auto in_f = hn::FirstN(df, size_t(ow - j));
      const auto in_i = hn::FirstN(di, size_t(ow - j));
      const auto a = hn::MaskedLoad(in_f, df, top + j), b = hn::MaskedLoad(in_f, df, bot + j);
      const auto t = nn::later_wins(df, a, b);
      hn::BlendedStore(hn::IfThenElse(t, b, a), in_f, df, out + i * ow + j);
      const auto ia = hn::MaskedLoad(in_i, di, itop + j), ib = hn::MaskedLoad(in_i, di, ibot + j);
      hn::BlendedStore(hn::IfThenElse(hn::RebindMask(di, t), ib, ia), in_i, di, am + i * ow + j);
    }
  }
}

}  // namespace

namespace {

// The max pool of every plane: plane(pl) gives plane pl's input [H, W] (x itself, or a
// per-thread buffer it filled).
template <class Plane>
void max_pool_planes(const char* fn, View4 y, std::span<int32_t> argmax, const PoolGeometry& g,
                     const Plane& plane) {
  nn::check_span(argmax, fn, "argmax", "[N·C·OH·OW]", g.planes * g.oh * g.ow);
  check(g.h * g.w <= INT32_MAX, fn, ": x: plane of ", g.h * g.w, " pixels exceeds int32 indices");
  nn::parallel_each_row(g.planes, g.h * g.w, [&](int64_t pl) {
    const float* in = plane(pl);
    float* out = y.data + pl * g.oh * g.ow;
    int32_t* am = argmax.data() + pl * g.oh * g.ow;
    if (g.k == 2 && g.s == 2 && g.p == 0 && g.w % 2 == 0) {
      max_pool2x2_plane(in, g.oh, g.w, out, am);
      return;
    }
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; ++j) {
        const int64_t h0 = std::max<int64_t>(i * g.s - g.p, 0), h1 = std::min(i * g.s - g.p + g.k, g.h);
        const int64_t w0 = std::max<int64_t>(j * g.s - g.p, 0), w1 = std::min(j * g.s - g.p + g.k, g.w);
        int64_t best = h0 * g.w + w0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w)
          {
            if (nn::later_wins(in[best], in[h * g.w + w])) best = h * g.w + w;  // NaN propagates
          }
        out[i * g.ow + j] = in[best];
        am[i * g.ow + j] = int32_t(best);
      }
  });
}

}  // namespace

void max_pool2d_forward(View4 y, std::span<int32_t> argmax, ConstView4 x, const Pool2dOptions& opts) {
  const int64_t hw = x.shape[2] * x.shape[3];
  const char* fn = "max_pool2d_forward";
  max_pool_planes(fn, y, argmax, check_pool(fn, x, "x", y, "y", opts), [&](int64_t pl) { return x.data + pl * hw; });
}

void max_pool2d_forward_of(View4 y, std::span<int32_t> argmax, const std::array<int64_t, 4>& x_shape,
                           const Pool2dOptions& opts, const std::function<void(int64_t, float*)>& make_plane) {
  const char* fn = "max_pool2d_forward_of";
  check(bool(make_plane), fn, ": make_plane is empty");
  for (int d = 0; d < 4; ++d) check(x_shape[size_t(d)] >= 0, fn, ": x_shape: expected sizes >= 0");
  const int64_t hw = x_shape[2] * x_shape[3];
  max_pool_planes(fn, y, argmax, check_pool_shape(fn, x_shape, y, "y", opts), [&](int64_t pl) {
    thread_local std::vector<float> buf;
    if (int64_t(buf.size()) < hw) buf.resize(size_t(hw));
    make_plane(pl, buf.data());
    return static_cast<const float*>(buf.data());
  });
}

void max_pool2d_affine_relu_forward(View4 y, std::span<int32_t> argmax, ConstView4 x,
                                    std::span<const float> scale, std::span<const float> shift,
                                    const Pool2dOptions& opts) {
  const char* fn = "max_pool2d_affine_relu_forward";
  const int64_t c = x.shape[1], hw = x.shape[2] * x.shape[3];
  nn::check_span(scale, fn, "scale", "[C]", c);
  nn::check_span(shift, fn, "shift", "[C]", c);
  max_pool_planes(fn, y, argmax, check_pool(fn, x, "x", y, "y", opts), [&](int64_t pl) {
    // The plane's max(x·scale + shift, 0) into this thread's buffer (in L1 for the pool), with
    // batch_norm2d_forward's operations: the same fused multiply-add, then v < 0 → 0 (NaN kept).
    thread_local std::vector<float> buf;
    if (int64_t(buf.size()) < hw) buf.resize(size_t(hw));
    const hn::ScalableTag<float> df;
    const auto a = hn::Set(df, scale[size_t(pl % c)]), sh = hn::Set(df, shift[size_t(pl % c)]);
    const float* in = x.data + pl * hw;
    vec::for_each_vector(hw, [&](int64_t j, const vec::MF* m) {
      const auto v = hn::MulAdd(vec::load(in + j, m), a, sh);
      vec::store(hn::IfThenZeroElse(hn::Lt(v, hn::Zero(df)), v), buf.data() + j, m);
    });
    return static_cast<const float*>(buf.data());
  });
}

void max_pool2d_backward(View4 d_x, ConstView4 d_y, std::span<const int32_t> argmax) {
  const char* fn = "max_pool2d_backward";
  const int64_t n = d_y.shape[0], c = d_y.shape[1], oh = d_y.shape[2], ow = d_y.shape[3];
  nn::check_nchw(d_y, fn, "d_y", "[N, C, OH, OW]", n, c, oh, ow);
  nn::check_nchw(d_x, fn, "d_x", "[N, C, H, W]", n, c, d_x.shape[2], d_x.shape[3]);
  nn::check_span(argmax, fn, "argmax", "[N·C·OH·OW]", n * c * oh * ow);
  const int64_t hw = d_x.shape[2] * d_x.shape[3];
  nn::check_argmax(fn, argmax, hw);
  nn::parallel_each_row(n * c, hw, [&](int64_t pl) {
    float* dx = d_x.data + pl * hw;
    std::fill(dx, dx + hw, 0.0f);
    const float* dy = d_y.data + pl * oh * ow;
    const int32_t* am = argmax.data() + pl * oh * ow;
    for (int64_t o = 0; o < oh * ow; ++o) dx[am[o]] += dy[o];
  });
}

void avg_pool2d_forward(View4 y, ConstView4 x, const Pool2dOptions& opts) {
  const auto g = check_pool("avg_pool2d_forward", x, "x", y, "y", opts);
  nn::parallel_each_row(g.planes, g.h * g.w, [&](int64_t pl) {
    const float* in = x.data + pl * g.h * g.w;
    float* out = y.data + pl * g.oh * g.ow;
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; ++j) {
        const int64_t h0 = std::max<int64_t>(i * g.s - g.p, 0), h1 = std::min(i * g.s - g.p + g.k, g.h);
        const int64_t w0 = std::max<int64_t>(j * g.s - g.p, 0), w1 = std::min(j * g.s - g.p + g.k, g.w);
        float acc = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) acc += in[h * g.w + w];
        out[i * g.ow + j] = acc / divisor(g, i, j, opts.count_include_pad);
      }
  });
}

void avg_pool2d_backward(View4 d_x, ConstView4 d_y, const Pool2dOptions& opts) {
  const auto g = check_pool("avg_pool2d_backward", d_x, "d_x", d_y, "d_y", opts);
  nn::parallel_each_row(g.planes, g.h * g.w, [&](int64_t pl) {
    float* dx = d_x.data + pl * g.h * g.w;
    std::fill(dx, dx + g.h * g.w, 0.0f);
    const float* dy = d_y.data + pl * g.oh * g.ow;
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; ++j) {
        const int64_t h0 = std::max<int64_t>(i * g.s - g.p, 0), h1 = std::min(i * g.s - g.p + g.k, g.h);
        const int64_t w0 = std::max<int64_t>(j * g.s - g.p, 0), w1 = std::min(j * g.s - g.p + g.k, g.w);
        const float gv = dy[i * g.ow + j] / divisor(g, i, j, opts.count_include_pad);
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) dx[h * g.w + w] += gv;
      }
  });
}

}  // namespace attnkit
