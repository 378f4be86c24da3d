// conv2d fast path: im2col + one sgemm per chunk of images (see conv2d.hpp).
//   forward:  col[C·KH·KW, nb·OH·OW] = im2col(x[n0 .. n0+nb)); y = w[O, C·KH·KW]·col (+ b),
//             scattered back to NCHW;
//   backward: d_col = wᵀ·d_y (chunk), d_x[n] = col2im(d_col); d_w += d_y·colᵀ; d_b += Σ d_y.
// A chunk holds enough images for a GEMM about kChunkColumns wide (small late-stage images give
// narrow per-image GEMMs that OpenBLAS runs far below its peak). Chunks run in parallel. d_w is
// reduced over kGroups fixed groups of images (each group sums its chunks in order into its own
// partial), then the partials are added in group order: the result depends only on N and the
// geometry, never on the thread count.
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

namespace {

// Valid output columns [j0, j1) of kernel column v: those whose input column j·s - p + v is
// inside [0, W).
inline void valid_columns(const Conv2dGeometry& g, int64_t v, int64_t& j0, int64_t& j1) {
  const int64_t lo = g.pad - v;                  // j·s >= lo
  const int64_t hi = g.w + g.pad - v;            // j·s <  hi
  j0 = lo <= 0 ? 0 : std::min(g.ow, (lo + g.stride - 1) / g.stride);
  j1 = hi <= 0 ? 0 : std::min(g.ow, (hi + g.stride - 1) / g.stride);
  if (j1 < j0) j1 = j0;
}

// Rows [i0, i1) of the output whose input row i·s - p + u is inside [0, H).
inline void valid_rows(const Conv2dGeometry& g, int64_t u, int64_t& i0, int64_t& i1) {
  const int64_t lo = g.pad - u, hi = g.h + g.pad - u;
  i0 = lo <= 0 ? 0 : std::min(g.oh, (lo + g.stride - 1) / g.stride);
  i1 = hi <= 0 ? 0 : std::min(g.oh, (hi + g.stride - 1) / g.stride);
  if (i1 < i0) i1 = i0;
}

// Stride 1 and OW = W ("same" width): kernel tap (u, v) maps output pixel i·OW + j to input
// pixel i·W + j + (u - p)·W + (v - p), one constant shift of the flattened plane. Copying (or
// adding) the flattened span [i0·OW + j0, (i1 - 1)·OW + j1) at once is right except in the
// columns outside [j0, j1), which wrap into the neighbouring row: the callers zero those.
inline bool flat_shift(const Conv2dGeometry& g) { return g.stride == 1 && g.ow == g.w; }

}  // namespace

void im2col(float* col, int64_t ld, const float* x, const Conv2dGeometry& g) {
  const int64_t ohw = g.oh * g.ow;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t u = 0; u < g.kh; ++u)
      for (int64_t v = 0; v < g.kw; ++v) {
        int64_t i0, i1, j0, j1;
        valid_rows(g, u, i0, i1);
        valid_columns(g, v, j0, j1);
        float* row = col + ((c * g.kh + u) * g.kw + v) * ld;
        const float* plane = x + c * g.h * g.w;
        if (i1 == i0 || j1 == j0) {
          std::fill(row, row + ohw, 0.0f);
          continue;
        }
        std::fill(row, row + i0 * g.ow, 0.0f);
        std::fill(row + i1 * g.ow, row + ohw, 0.0f);
        if (flat_shift(g)) {
          const int64_t first = i0 * g.ow + j0, last = (i1 - 1) * g.ow + j1;
          const float* src = plane + first + (u - g.pad) * g.w + (v - g.pad);
          float* dst = row + first;
          for (int64_t e = 0; e < last - first; ++e) dst[e] = src[e];
          for (int64_t i = i0; i < i1; ++i) {
            for (int64_t j = 0; j < j0; ++j) row[i * g.ow + j] = 0.0f;
            for (int64_t j = j1; j < g.ow; ++j) row[i * g.ow + j] = 0.0f;
          }
          continue;
        }
        for (int64_t i = i0; i < i1; ++i) {
          float* r = row + i * g.ow;
          // src[(j - j0)·s] is input column j·s - p + v of input row i·s - p + u.
          const float* src = plane + (i * g.stride - g.pad + u) * g.w + j0 * g.stride - g.pad + v;
          for (int64_t j = 0; j < j0; ++j) r[j] = 0.0f;
          for (int64_t j = j0; j < j1; ++j) r[j] = src[(j - j0) * g.stride];
          for (int64_t j = j1; j < g.ow; ++j) r[j] = 0.0f;
        }
      }
}

void col2im(float* x, float* col, int64_t ld, const Conv2dGeometry& g) {
  std::fill(x, x + g.c * g.h * g.w, 0.0f);
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t u = 0; u < g.kh; ++u)
      for (int64_t v = 0; v < g.kw; ++v) {
        int64_t i0, i1, j0, j1;
        valid_rows(g, u, i0, i1);
        valid_columns(g, v, j0, j1);
        if (i1 == i0 || j1 == j0) continue;
        float* row = col + ((c * g.kh + u) * g.kw + v) * ld;
        float* plane = x + c * g.h * g.w;
        if (flat_shift(g)) {
          for (int64_t i = i0; i < i1; ++i) {  // the wrapping columns must add nothing
            for (int64_t j = 0; j < j0; ++j) row[i * g.ow + j] = 0.0f;
            for (int64_t j = j1; j < g.ow; ++j) row[i * g.ow + j] = 0.0f;
          }
          const int64_t first = i0 * g.ow + j0, last = (i1 - 1) * g.ow + j1;
          float* dst = plane + first + (u - g.pad) * g.w + (v - g.pad);
          const float* src = row + first;
          for (int64_t e = 0; e < last - first; ++e) dst[e] += src[e];
          continue;
        }
        for (int64_t i = i0; i < i1; ++i) {
          float* dst = plane + (i * g.stride - g.pad + u) * g.w + j0 * g.stride - g.pad + v;
          const float* r = row + i * g.ow + j0;
          for (int64_t j = 0; j < j1 - j0; ++j) dst[j * g.stride] += r[j];
        }
      }
}

}  // namespace nn

int64_t conv2d_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  const int64_t span = in + 2 * padding - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

namespace {

constexpr int64_t kGroups = 16;       // fixed d_w reduction groups (a function of N only)
constexpr int64_t kChunkColumns = 512;  // aim for GEMMs at least this wide (images × OH·OW)

// Per-thread scratch, grown on demand and kept for the next call.
float* scratch(int which, int64_t n) {
  thread_local std::vector<float> buf[3];
  std::vector<float>& v = buf[which];
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

// Images per GEMM: enough that the GEMM is about kChunkColumns wide, at most `limit`. A function
// of the geometry only, so results never depend on the thread count.
int64_t images_per_gemm(const nn::Conv2dGeometry& g, int64_t limit) {
  const int64_t ohw = g.oh * g.ow;
  return std::clamp<int64_t>((kChunkColumns + ohw - 1) / ohw, 1, std::max<int64_t>(limit, 1));
}

// col[K, nb·OH·OW] for images n0 .. n0+nb-1 (image b's columns at b·OH·OW); pointwise
// convolutions copy the images (their column matrix is the image itself).
void gather_columns(float* col, ConstView4 x, int64_t n0, int64_t nb, const nn::Conv2dGeometry& g) {
  const int64_t ohw = g.oh * g.ow, ld = nb * ohw;
  for (int64_t b = 0; b < nb; ++b) {
    if (g.pointwise()) {
      for (int64_t c = 0; c < g.c; ++c) std::copy_n(x.ptr(n0 + b, c), ohw, col + c * ld + b * ohw);
    } else {
      nn::im2col(col + b * ohw, ld, x.ptr(n0 + b), g);
    }
  }
}

// m[O, nb·OH·OW] (image b at columns b·OH·OW) from t[N, O, OH, OW] for images n0 .. n0+nb-1.
void gather_images(float* m, ConstView4 t, int64_t n0, int64_t nb, int64_t o, int64_t ohw) {
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t r = 0; r < o; ++r) std::copy_n(t.ptr(n0 + b, r), ohw, m + r * nb * ohw + b * ohw);
}

}  // namespace

void conv2d_forward(View4 y, ConstView4 x, ConstView4 w, std::span<const float> b,
                    const Conv2dOptions& opts) {
  const auto g = nn::check_conv2d("conv2d_forward", y, "y", x, w, b, opts);
  const int64_t k = g.c * g.kh * g.kw, ohw = g.oh * g.ow;
  if (g.n == 0 || g.o == 0 || ohw == 0) return;
  if (k == 0) {
    for (int64_t n = 0; n < g.n; ++n) std::fill(y.ptr(n), y.ptr(n) + g.o * ohw, 0.0f);
  } else {
    const int64_t per = images_per_gemm(g, g.n), chunks = (g.n + per - 1) / per;
    BlasThreadsScope blas(1);
    parallel_for(chunks, [&](int64_t ch) {
      const int64_t n0 = ch * per, nb = std::min(per, g.n - n0), cols = nb * ohw;
      const float* col = x.ptr(n0);
      if (!(g.pointwise() && nb == 1)) {
        float* c = scratch(0, k * cols);
        gather_columns(c, x, n0, nb, g);
        col = c;
      }
      if (nb == 1) {
        sgemm(false, false, g.o, ohw, k, 1.0f, w.data, k, col, ohw, 0.0f, y.ptr(n0), ohw);
        return;
      }
      float* out = scratch(1, g.o * cols);
      sgemm(false, false, g.o, cols, k, 1.0f, w.data, k, col, cols, 0.0f, out, cols);
      for (int64_t bi = 0; bi < nb; ++bi)
        for (int64_t o = 0; o < g.o; ++o) std::copy_n(out + o * cols + bi * ohw, ohw, y.ptr(n0 + bi, o));
    });
  }
  if (!b.empty())
    parallel_for(g.n, [&](int64_t n) {
      for (int64_t o = 0; o < g.o; ++o) {
        float* out = y.ptr(n, o);
        const float bo = b[size_t(o)];
        for (int64_t p = 0; p < ohw; ++p) out[p] += bo;
      }
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
  // Group grp sums images [grp·per, (grp+1)·per) into its own d_w partial, nb images per GEMM.
  const int64_t groups = std::min(g.n, kGroups), per = (g.n + groups - 1) / groups;
  const int64_t nb_max = images_per_gemm(g, per);
  std::vector<float> partial(want_w ? size_t(groups * g.o * k) : 0, 0.0f);
  BlasThreadsScope blas(1);
  parallel_for(groups, [&](int64_t grp) {
    const int64_t end = std::min(g.n, (grp + 1) * per);
    for (int64_t n0 = grp * per; n0 < end; n0 += nb_max) {
      const int64_t nb = std::min(nb_max, end - n0), cols = nb * ohw;
      const float* dy = d_y.ptr(n0);
      if (nb > 1) {
        float* m = scratch(2, g.o * cols);
        gather_images(m, d_y, n0, nb, g.o, ohw);
        dy = m;
      }
      if (want_w) {
        const float* col = x.ptr(n0);
        if (!(g.pointwise() && nb == 1)) {
          float* c = scratch(0, k * cols);
          gather_columns(c, x, n0, nb, g);
          col = c;
        }
        sgemm(false, true, g.o, k, cols, 1.0f, dy, cols, col, cols, 1.0f, partial.data() + grp * g.o * k, k);
      }
      if (!want_x) continue;
      if (g.pointwise() && nb == 1) {
        sgemm(true, false, k, ohw, g.o, 1.0f, w.data, k, dy, ohw, 0.0f, d_x.ptr(n0), ohw);
        continue;
      }
      float* dcol = scratch(1, k * cols);
      sgemm(true, false, k, cols, g.o, 1.0f, w.data, k, dy, cols, 0.0f, dcol, cols);
      for (int64_t b = 0; b < nb; ++b) {
        if (g.pointwise()) {
          for (int64_t c = 0; c < g.c; ++c) std::copy_n(dcol + c * cols + b * ohw, ohw, d_x.ptr(n0 + b, c));
        } else {
          nn::col2im(d_x.ptr(n0 + b), dcol + b * ohw, cols, g);
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
