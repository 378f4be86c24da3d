// conv2d fast path: im2col + sgemm per image (see conv2d.hpp).
//   forward:  col[C·KH·KW, OH·OW] = im2col(x[n]);  y[n] = w[O, C·KH·KW]·col + b
//   backward: d_col = wᵀ·d_y[n], d_x[n] = col2im(d_col);  d_w += d_y[n]·colᵀ;  d_b += Σ d_y[n]
// Images run in parallel. d_w is reduced over kGroups fixed groups of images (each group sums its
// images in order into its own partial), then the partials are added in group order: the result
// depends only on N, never on the thread count.
#include <algorithm>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "attnkit/ops/gemm.hpp"
#include "conv2d_common.hpp"
#include "nn_common.hpp"

namespace attnkit {
namespace nn {

Conv2dGeometry check_conv2d(const char* fn, ConstView4 out, const char* out_name, ConstView4 x,
                            ConstView4 w, std::span<const float> b, const Conv2dOptions& opts) {
  check_positive(fn, "stride", opts.stride);
  check(opts.padding >= 0, fn, ": padding: expected >= 0, got ", opts.padding);
  Conv2dGeometry g;
  g.n = x.shape[0], g.c = x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.o = w.shape[0], g.kh = w.shape[2], g.kw = w.shape[3];
  g.stride = opts.stride, g.pad = opts.padding;
  check_nchw(x, fn, "x", "[N, C, H, W]", g.n, g.c, g.h, g.w);
  check(w.shape[1] == g.c, fn, ": w: expected [O, C, KH, KW] with C = ", g.c, " (x's channels), got C = ",
        w.shape[1]);
  check_positive(fn, "w: KH", g.kh);
  check_positive(fn, "w: KW", g.kw);
  check_nchw(w, fn, "w", "[O, C, KH, KW]", g.o, g.c, g.kh, g.kw);
  g.oh = conv2d_output_size(g.h, g.kh, g.stride, g.pad);
  g.ow = conv2d_output_size(g.w, g.kw, g.stride, g.pad);
  check_nchw(out, fn, out_name, "[N, O, OH, OW]", g.n, g.o, g.oh, g.ow);
  check_span(b, fn, out_name[0] == 'd' ? "d_b" : "b", "[O]", g.o, true);
  return g;
}

void im2col(float* col, const float* x, const Conv2dGeometry& g) {
  const int64_t ohw = g.oh * g.ow;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t u = 0; u < g.kh; ++u)
      for (int64_t v = 0; v < g.kw; ++v) {
        float* row = col + ((c * g.kh + u) * g.kw + v) * ohw;
        const float* plane = x + c * g.h * g.w;
        for (int64_t i = 0; i < g.oh; ++i) {
          const int64_t hi = i * g.stride - g.pad + u;
          float* r = row + i * g.ow;
          if (hi < 0 || hi >= g.h) {
            std::fill(r, r + g.ow, 0.0f);
            continue;
          }
          const float* src = plane + hi * g.w;
          for (int64_t j = 0; j < g.ow; ++j) {
            const int64_t wi = j * g.stride - g.pad + v;
            r[j] = (wi >= 0 && wi < g.w) ? src[wi] : 0.0f;
          }
        }
      }
}

void col2im(float* x, const float* col, const Conv2dGeometry& g) {
  const int64_t ohw = g.oh * g.ow;
  std::fill(x, x + g.c * g.h * g.w, 0.0f);
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t u = 0; u < g.kh; ++u)
      for (int64_t v = 0; v < g.kw; ++v) {
        const float* row = col + ((c * g.kh + u) * g.kw + v) * ohw;
        float* plane = x + c * g.h * g.w;
        for (int64_t i = 0; i < g.oh; ++i) {
          const int64_t hi = i * g.stride - g.pad + u;
          if (hi < 0 || hi >= g.h) continue;
          float* dst = plane + hi * g.w;
          for (int64_t j = 0; j < g.ow; ++j) {
            const int64_t wi = j * g.stride - g.pad + v;
            if (wi >= 0 && wi < g.w) dst[wi] += row[i * g.ow + j];
          }
        }
      }
}

}  // namespace nn

int64_t conv2d_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  const int64_t span = in + 2 * padding - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

namespace {

constexpr int64_t kGroups = 16;  // fixed d_w reduction groups (a function of N only)

// Per-thread scratch, grown on demand and kept for the next call.
std::vector<float>& scratch(int which) {
  thread_local std::vector<float> buf[2];
  return buf[which];
}

float* sized(std::vector<float>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

}  // namespace

void conv2d_forward(View4 y, ConstView4 x, ConstView4 w, std::span<const float> b,
                    const Conv2dOptions& opts) {
  const auto g = nn::check_conv2d("conv2d_forward", y, "y", x, w, b, opts);
  const int64_t k = g.c * g.kh * g.kw, ohw = g.oh * g.ow;
  if (g.n == 0 || g.o == 0 || ohw == 0) return;
  BlasThreadsScope blas(1);
  parallel_for(g.n, [&](int64_t n) {
    const float* col = x.ptr(n);
    if (!g.pointwise()) {
      float* c = sized(scratch(0), k * ohw);
      nn::im2col(c, x.ptr(n), g);
      col = c;
    }
    float* out = y.ptr(n);
    if (k == 0) {
      std::fill(out, out + g.o * ohw, 0.0f);
    } else {
      sgemm(false, false, g.o, ohw, k, 1.0f, w.data, k, col, ohw, 0.0f, out, ohw);
    }
    if (!b.empty())
      for (int64_t o = 0; o < g.o; ++o)
        for (int64_t p = 0; p < ohw; ++p) out[o * ohw + p] += b[size_t(o)];
  });
}

void conv2d_backward(View4 d_x, View4 d_w, std::span<float> d_b, ConstView4 d_y, ConstView4 x,
                     ConstView4 w, const Conv2dOptions& opts) {
  const char* fn = "conv2d_backward";
  const auto g = nn::check_conv2d(fn, d_y, "d_y", x, w, {}, opts);
  nn::check_span(std::span<const float>(d_b), fn, "d_b", "[O]", g.o, true);
  if (nn::present4(d_x)) nn::check_nchw(d_x, fn, "d_x", "[N, C, H, W]", g.n, g.c, g.h, g.w);
  if (nn::present4(d_w)) nn::check_nchw(d_w, fn, "d_w", "[O, C, KH, KW]", g.o, g.c, g.kh, g.kw);
  const int64_t k = g.c * g.kh * g.kw, ohw = g.oh * g.ow;
  if (!d_b.empty())
    parallel_for(g.o, [&](int64_t o) {
      double acc = 0;
      for (int64_t n = 0; n < g.n; ++n) acc += nn::sum_double(d_y.ptr(n, o), ohw);
      d_b[size_t(o)] += float(acc);
    });
  const bool want_x = nn::present4(d_x), want_w = nn::present4(d_w) && k > 0;
  if (!want_x && !want_w) return;
  if (want_x && (k == 0 || g.o == 0 || ohw == 0))  // nothing reaches x: its gradient is zero
    for (int64_t n = 0; n < g.n; ++n) std::fill(d_x.ptr(n), d_x.ptr(n) + g.c * g.h * g.w, 0.0f);
  if (g.n == 0 || k == 0 || g.o == 0 || ohw == 0) return;
  const int64_t groups = std::min(g.n, kGroups), per = (g.n + groups - 1) / groups;
  std::vector<float> partial(want_w ? size_t(groups * g.o * k) : 0, 0.0f);
  BlasThreadsScope blas(1);
  parallel_for(groups, [&](int64_t grp) {
    for (int64_t n = grp * per; n < std::min(g.n, (grp + 1) * per); ++n) {
      if (want_w) {
        const float* col = x.ptr(n);
        if (!g.pointwise()) {
          float* c = sized(scratch(0), k * ohw);
          nn::im2col(c, x.ptr(n), g);
          col = c;
        }
        sgemm(false, true, g.o, k, ohw, 1.0f, d_y.ptr(n), ohw, col, ohw, 1.0f,
              partial.data() + grp * g.o * k, k);
      }
      if (want_x) {
        if (g.pointwise()) {
          sgemm(true, false, k, ohw, g.o, 1.0f, w.data, k, d_y.ptr(n), ohw, 0.0f, d_x.ptr(n), ohw);
        } else {
          float* dcol = sized(scratch(1), k * ohw);
          sgemm(true, false, k, ohw, g.o, 1.0f, w.data, k, d_y.ptr(n), ohw, 0.0f, dcol, ohw);
          nn::col2im(d_x.ptr(n), dcol, g);
        }
      }
    }
  });
  if (!want_w) return;
  parallel_for(g.o, [&](int64_t o) {
    float* dw = d_w.ptr(o);
    for (int64_t grp = 0; grp < groups; ++grp) {
      const float* p = partial.data() + (grp * g.o + o) * k;
      for (int64_t i = 0; i < k; ++i) dw[i] += p[i];
    }
  });
}

}  // namespace attnkit
