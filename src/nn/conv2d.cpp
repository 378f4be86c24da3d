// conv2d fast path: im2col + one sgemm per chunk of images (see conv2d.hpp). Passes of the layer
// classes nn::onednn_applies selects run by oneDNN's convolution (conv2d_onednn.cpp). 3×3, stride-1,
// padding-1 layers with >= 8 channels on planes of at least 12×12 (or of one or two vectors of
// tiles, such as 7×7) compute y and d_x by Winograd F(2×2, 3×3) instead (conv2d_winograd.cpp), and
// d_w too on the larger planes.
//   forward:  col[C·KH·KW, nb·OH·OW] = im2col(x[n0 .. n0+nb)); y = w[O, C·KH·KW]·col (+ b),
//             scattered back to NCHW;
//   backward: d_col = wᵀ·d_y (chunk), d_x[n] = col2im(d_col); d_w += d_y·colᵀ; d_b += Σ d_y.
// In the bf16 mixed-precision mode (ops/matmul_precision.hpp) the passes onednn_applies selects
// run by oneDNN's bf16 convolution, the others by the column path with its products on gemm_bf16
// (bf16 operands, float32 accumulation); Winograd's transformed products are not used.
// A chunk holds enough images for a GEMM about kChunkColumns wide (small late-stage images give
// narrow per-image GEMMs that OpenBLAS runs far below its peak). Chunks run in parallel. d_w is
// reduced over fixed groups of images (nn::weight_gradient_groups; each group sums its chunks in
// order into its own partial), then the partials are added in group order: the result depends
// only on N and the geometry, never on the thread count.
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/gemm_bf16.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "conv2d_common.hpp"
#include "hwy/highway.h"
#include "nn_common.hpp"
#include "ops/vector_loop.hpp"

namespace attnkit {
namespace hn = hwy::HWY_NAMESPACE;
namespace nn {

Conv2dGeometry check_conv2d(const char* fn, ConstView4 out, const char* out_name, ConstView4 x,
                            ConstView4 w, std::span<const float> b, const Conv2dOptions& opts) {
  check_positive(fn, "stride", opts.stride);
  // Sizes below 2^40 keep H + 2·padding and every output extent within int64.
  check(opts.padding >= 0 && opts.padding <= (int64_t(1) << 40), fn, ": padding: expected in [0, 2^40], got ",
        opts.padding);
  Conv2dGeometry g;
  g.n = x.shape[0], g.c = x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.o = w.shape[0], g.kh = w.shape[2], g.kw = w.shape[3];
  g.stride = opts.stride, g.pad = opts.padding;
  g.bf16 = matmul_precision() == MatmulPrecision::kBf16;
  check_nchw(x, fn, "x", "[N, C, H, W]", g.n, g.c, g.h, g.w);
  check(w.shape[1] == g.c, fn, ": w: expected [O, C, KH, KW] with C = ", g.c, " (x's channels), got C = ",
        w.shape[1]);
  check_positive(fn, "w: KH", g.kh);
  check_positive(fn, "w: KW", g.kw);
  check_nchw(w, fn, "w", "[O, C, KH, KW]", g.o, g.c, g.kh, g.kw);
  check_kernel_fits(fn, g.kh, g.kw, g.h, g.w, g.pad);
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
// columns outside [j0, j1), which wrap into the neighbouring row: column_mask drops those.
inline bool flat_shift(const Conv2dGeometry& g) { return g.stride == 1 && g.ow == g.w; }

// keep[e] = 1 where output pixel e (of OH·OW) lies in a column of [j0, j1); zero padding after
// the end lets a vector of bytes be loaded at any e < OH·OW. Cached per thread (a few entries per
// geometry; cleared if many geometries pass through).
const std::vector<uint8_t>& column_mask(const Conv2dGeometry& g, int64_t j0, int64_t j1) {
  thread_local std::map<std::array<int64_t, 4>, std::vector<uint8_t>> cache;
  const std::array<int64_t, 4> key{g.oh, g.ow, j0, j1};
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= 256) cache.clear();
  std::vector<uint8_t> keep(size_t(g.oh * g.ow + 64), 0);
  for (int64_t i = 0; i < g.oh; ++i)
    for (int64_t j = 0; j < g.ow; ++j) keep[size_t(i * g.ow + j)] = j >= j0 && j < j1;
  return cache.emplace(key, std::move(keep)).first->second;
}

// Lanes e .. e + lanes - 1 whose keep byte is set (keep has a vector's slack past its end).
template <class D>
HWY_INLINE hn::Mask<D> kept_lanes(D df, const uint8_t* keep) {
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint8_t, D> du8;
  return hn::RebindMask(df, hn::Ne(hn::PromoteTo(di, hn::LoadU(du8, keep)), hn::Zero(di)));
}

// r[e] = keep[e] ? src[e] : 0 for e < n, whole vectors at a time (a masked tail, no scalar loop:
// the spans are often shorter than a few vectors). src is read only where e < n.
void masked_copy(float* HWY_RESTRICT r, const float* HWY_RESTRICT src, const uint8_t* keep, int64_t n) {
  const hn::ScalableTag<float> df;
  vec::for_each_vector(n, [&](int64_t e, const vec::MF* in) {
    vec::store(hn::IfThenElseZero(kept_lanes(df, keep + e), vec::load(src + e, in)), r + e, in);
  });
}

// r[0, n) = 0 with vector stores (spans here are short: a library call would cost more).
void zero_floats(float* r, int64_t n) {
  const hn::ScalableTag<float> df;
  vec::for_each_vector(n, [&](int64_t e, const vec::MF* in) { vec::store(hn::Zero(df), r + e, in); });
}

// dst[e] += keep[e] ? src[e] : 0 for e < n, as masked_copy (dst[e] is left as it is where not kept).
void masked_add(float* HWY_RESTRICT dst, const float* HWY_RESTRICT src, const uint8_t* keep, int64_t n) {
  const hn::ScalableTag<float> df;
  vec::for_each_vector(n, [&](int64_t e, const vec::MF* in) {
    auto k = kept_lanes(df, keep + e);
    if (in) k = hn::And(*in, k);
    const auto d = vec::load(dst + e, in);
    vec::store(hn::IfThenElse(k, hn::Add(d, hn::MaskedLoad(k, df, src + e)), d), dst + e, in);
  });
}

}  // namespace

// Copies (or, for col2im, adds) one kernel tap's row of the column matrix for every channel; the
// tap's valid ranges are computed once (outside the channel loop: they need integer divisions).
void im2col(float* col, int64_t ld, const float* x, const Conv2dGeometry& g) {
  const int64_t ohw = g.oh * g.ow, hw = g.h * g.w, taps = g.kh * g.kw;
  for (int64_t u = 0; u < g.kh; ++u)
    for (int64_t v = 0; v < g.kw; ++v) {
      int64_t i0, i1, j0, j1;
      valid_rows(g, u, i0, i1);
      valid_columns(g, v, j0, j1);
      float* row = col + (u * g.kw + v) * ld;  // channel c's row: row + c·taps·ld
      if (i1 == i0 || j1 == j0) {
        for (int64_t c = 0; c < g.c; ++c) std::fill(row + c * taps * ld, row + c * taps * ld + ohw, 0.0f);
        continue;
      }
      if (flat_shift(g)) {
        const int64_t first = i0 * g.ow + j0, last = (i1 - 1) * g.ow + j1;
        const int64_t shift = (u - g.pad) * g.w + (v - g.pad);
        const std::vector<uint8_t>& keep = column_mask(g, j0, j1);
        for (int64_t c = 0; c < g.c; ++c) {
          float* r = row + c * taps * ld;
          const float* src = x + c * hw + first + shift;  // inside the plane for [first, last)
          zero_floats(r, first);
          masked_copy(r + first, src, keep.data() + first, last - first);
          zero_floats(r + last, ohw - last);
        }
        continue;
      }
      for (int64_t c = 0; c < g.c; ++c) {
        float* r = row + c * taps * ld;
        const float* plane = x + c * hw;
        std::fill(r, r + i0 * g.ow, 0.0f);
        std::fill(r + i1 * g.ow, r + ohw, 0.0f);
        for (int64_t i = i0; i < i1; ++i) {
          float* ri = r + i * g.ow;
          // src[(j - j0)·s] is input column j·s - p + v of input row i·s - p + u.
          const float* src = plane + (i * g.stride - g.pad + u) * g.w + j0 * g.stride - g.pad + v;
          for (int64_t j = 0; j < j0; ++j) ri[j] = 0.0f;
          for (int64_t j = j0; j < j1; ++j) ri[j] = src[(j - j0) * g.stride];
          for (int64_t j = j1; j < g.ow; ++j) ri[j] = 0.0f;
        }
      }
    }
}

// Each pixel of channel c receives its taps' contributions in (u, v) order, as with a c-outer
// loop: the sums do not depend on the loop order chosen here.
void col2im(float* x, const float* col, int64_t ld, const Conv2dGeometry& g) {
  const int64_t hw = g.h * g.w, taps = g.kh * g.kw;
  std::fill(x, x + g.c * hw, 0.0f);
  for (int64_t u = 0; u < g.kh; ++u)
    for (int64_t v = 0; v < g.kw; ++v) {
      int64_t i0, i1, j0, j1;
      valid_rows(g, u, i0, i1);
      valid_columns(g, v, j0, j1);
      if (i1 == i0 || j1 == j0) continue;
      const float* row = col + (u * g.kw + v) * ld;
      if (flat_shift(g)) {
        const int64_t first = i0 * g.ow + j0, last = (i1 - 1) * g.ow + j1;
        const int64_t shift = (u - g.pad) * g.w + (v - g.pad);
        const std::vector<uint8_t>& keep = column_mask(g, j0, j1);
        for (int64_t c = 0; c < g.c; ++c) {
          const float* r = row + c * taps * ld;
          float* dst = x + c * hw + first + shift;  // inside the plane for [first, last)
          masked_add(dst, r + first, keep.data() + first, last - first);
        }
        continue;
      }
      for (int64_t c = 0; c < g.c; ++c) {
        const float* r = row + c * taps * ld;
        float* plane = x + c * hw;
        for (int64_t i = i0; i < i1; ++i) {
          float* dst = plane + (i * g.stride - g.pad + u) * g.w + j0 * g.stride - g.pad + v;
          const float* ri = r + i * g.ow + j0;
          for (int64_t j = 0; j < j1 - j0; ++j) dst[j * g.stride] += ri[j];
        }
      }
    }
}

}  // namespace nn

int64_t conv2d_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  const int64_t span = in + 2 * padding - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

float* nn::conv_scratch(int which, int64_t n) {
  thread_local std::vector<float> buf[3];
  std::vector<float>& v = buf[which];
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

nn::ImageGroups nn::weight_gradient_groups(int64_t n) {
  constexpr int64_t kGroups = 16;
  if (n <= 0) return {1, 0};
  const int64_t per = (n + std::min(n, kGroups) - 1) / std::min(n, kGroups);
  return {per, (n + per - 1) / per};
}

namespace {

constexpr int64_t kChunkColumns = 512;      // aim for GEMMs this wide (images × OH·OW) ...
constexpr int64_t kChunkFloats = 256 << 10;  // ... with a column matrix that stays in L2 (1 MiB)

float* scratch(int which, int64_t n) { return nn::conv_scratch(which, n); }

// C[m, n] = op(A)·op(B) + beta·C (row-major, as sgemm with alpha 1): gemm_bf16 when bf16, else sgemm.
void product(bool bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (bf16) return gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

// Images per GEMM: enough that the GEMM is about kChunkColumns wide, but a column matrix of at
// most kChunkFloats (or one image), and at most `limit`. A function of the geometry only, so
// results never depend on the thread count.
int64_t images_per_gemm(const nn::Conv2dGeometry& g, int64_t limit) {
  const int64_t ohw = g.oh * g.ow, k = g.c * g.kh * g.kw;
  // A 1×1 convolution of one image needs no column matrix at all: copying several images into one
  // cost more than the wider GEMM gained (measured on the CNN's shortcut shapes).
  const int64_t target = g.pointwise() ? 1 : kChunkColumns;
  const int64_t want = std::min((target + ohw - 1) / ohw, kChunkFloats / std::max<int64_t>(k * ohw, 1));
  return std::clamp<int64_t>(want, 1, std::max<int64_t>(limit, 1));
}

// col[K, nb·OH·OW] for images n0 .. n0+nb-1 (image b's columns at b·OH·OW). Not for pointwise
// convolutions, which run one image per GEMM on the image itself.
void gather_columns(float* col, ConstView4 x, int64_t n0, int64_t nb, const nn::Conv2dGeometry& g) {
  const int64_t ohw = g.oh * g.ow, ld = nb * ohw;
  for (int64_t b = 0; b < nb; ++b) nn::im2col(col + b * ohw, ld, x.ptr(n0 + b), g);
}

// m[O, nb·OH·OW] (image b at columns b·OH·OW) from t[N, O, OH, OW] for images n0 .. n0+nb-1.
void gather_images(float* m, ConstView4 t, int64_t n0, int64_t nb, int64_t o, int64_t ohw) {
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t r = 0; r < o; ++r) std::copy_n(t.ptr(n0 + b, r), ohw, m + r * nb * ohw + b * ohw);
}

}  // namespace

namespace {

// y = conv(x, w) without bias, w as [O, C·KH·KW]: one GEMM per chunk of images.
void forward_chunks(View4 y, ConstView4 x, const float* w, const nn::Conv2dGeometry& g) {
  if (!g.bf16 && nn::winograd_applies(g)) return nn::winograd_conv3x3(y, x, w, false, g);
  const int64_t k = g.c * g.kh * g.kw, ohw = g.oh * g.ow;
  const int64_t per = images_per_gemm(g, g.n), chunks = (g.n + per - 1) / per;
  BlasThreadsScope blas(1);
  parallel_for(chunks, [&](int64_t ch) {
    const int64_t n0 = ch * per, nb = std::min(per, g.n - n0), cols = nb * ohw;
    const float* col = x.ptr(n0);
    if (!g.pointwise()) {  // pointwise: nb = 1, the image is its column matrix
      float* c = scratch(0, k * cols);
      gather_columns(c, x, n0, nb, g);
      col = c;
    }
    if (nb == 1) {
      product(g.bf16, false, false, g.o, ohw, k, w, k, col, ohw, 0.0f, y.ptr(n0), ohw);
      return;
    }
    float* out = scratch(1, g.o * cols);
    product(g.bf16, false, false, g.o, cols, k, w, k, col, cols, 0.0f, out, cols);
    for (int64_t bi = 0; bi < nb; ++bi)
      for (int64_t o = 0; o < g.o; ++o) std::copy_n(out + o * cols + bi * ohw, ohw, y.ptr(n0 + bi, o));
  });
}

// The input gradient of a stride-1 convolution with a square kernel and padding p <= KH - 1 is a
// stride-1 convolution of d_y: d_x = conv(d_y, w_t, padding KH - 1 - p), w_t[c, o, u, v] =
// w[o, c, KH-1-u, KW-1-v]. Its GEMM is [C, O·KH·KW]·[O·KH·KW, pixels]: a long inner dimension
// and a C-row output, instead of a [C·KH·KW, pixels] column gradient (O inner) and col2im.
// Used when O < C (CBAM's 2 → 1 spatial gate); with O >= C (the 3×3 layers) the column path
// measured faster (bench/cnn_bench.cpp shapes, 1 thread: 103–124 vs 70–105 GFLOP/s).
bool input_gradient_is_convolution(const nn::Conv2dGeometry& g) {
  return g.o < g.c && g.stride == 1 && g.kh == g.kw && g.pad <= g.kh - 1 && !g.pointwise();
}

// The geometry of that convolution of d_y (valid when the conditions above hold but O < C).
nn::Conv2dGeometry input_gradient_geometry(const nn::Conv2dGeometry& g) {
  nn::Conv2dGeometry t;
  t.n = g.n, t.c = g.o, t.h = g.oh, t.w = g.ow;
  t.o = g.c, t.kh = g.kh, t.kw = g.kw;
  t.stride = 1, t.pad = g.kh - 1 - g.pad;
  t.oh = g.h, t.ow = g.w;
  t.bf16 = g.bf16;
  return t;
}

// A 3×3 same-size convolution's input gradient is itself one that Winograd runs (faster than
// the column path for every such layer of the CNN; see conv2d_winograd.cpp).
bool input_gradient_is_winograd(const nn::Conv2dGeometry& g) {
  return nn::winograd_applies(g) && nn::winograd_applies(input_gradient_geometry(g));
}

void input_gradient_by_convolution(View4 d_x, ConstView4 d_y, ConstView4 w, const nn::Conv2dGeometry& g) {
  const nn::Conv2dGeometry t = input_gradient_geometry(g);
  const int64_t taps = g.kh * g.kw;
  std::vector<float> wt(size_t(g.c * g.o * taps));
  for (int64_t o = 0; o < g.o; ++o)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t q = 0; q < taps; ++q) wt[size_t((c * g.o + o) * taps + q)] = w.ptr(o, c)[taps - 1 - q];
  forward_chunks(d_x, d_y, wt.data(), t);
}

}  // namespace

void conv2d_forward(View4 y, ConstView4 x, ConstView4 w, std::span<const float> b,
                    const Conv2dOptions& opts) {
  const auto g = nn::check_conv2d("conv2d_forward", y, "y", x, w, b, opts);
  const int64_t k = g.c * g.kh * g.kw, ohw = g.oh * g.ow;
  if (g.n == 0 || g.o == 0 || ohw == 0) return;
  if (k == 0) {
    for (int64_t n = 0; n < g.n; ++n) std::fill(y.ptr(n), y.ptr(n) + g.o * ohw, 0.0f);
  } else if (nn::onednn_applies(nn::ConvPass::kForward, g)) {
    nn::onednn_conv_forward(y, x, w.data, g);
  } else {
    forward_chunks(y, x, w.data, g);
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
  const bool x_by_onednn = want_x && nn::onednn_applies(nn::ConvPass::kBackwardData, g);
  if (x_by_onednn) nn::onednn_conv_backward_data(d_x, d_y, w.data, g);
  const bool x_by_winograd = want_x && !g.bf16 && !x_by_onednn && input_gradient_is_winograd(g);
  if (x_by_winograd) nn::winograd_conv3x3(d_x, d_y, w.data, true, input_gradient_geometry(g));
  const bool x_by_conv = want_x && !x_by_onednn && !x_by_winograd && input_gradient_is_convolution(g);
  if (x_by_conv) input_gradient_by_convolution(d_x, d_y, w, g);
  const bool x_by_columns = want_x && !x_by_onednn && !x_by_conv && !x_by_winograd;
  const bool w_by_onednn = want_w && nn::onednn_applies(nn::ConvPass::kBackwardWeights, g);
  if (w_by_onednn) nn::onednn_conv_backward_weights(d_w, d_y, x, g);
  const bool w_by_winograd = want_w && !g.bf16 && !w_by_onednn && nn::winograd_weight_gradient_applies(g);
  if (w_by_winograd) nn::winograd_weight_gradient(d_w, d_y, x, g);
  const bool w_by_columns = want_w && !w_by_onednn && !w_by_winograd;
  if (!w_by_columns && !x_by_columns) return;
  // Group grp sums images [grp·per, (grp+1)·per) into its own d_w partial, nb images per GEMM.
  const nn::ImageGroups image_groups = nn::weight_gradient_groups(g.n);
  const int64_t per = image_groups.per, groups = image_groups.count;
  const int64_t nb_max = images_per_gemm(g, per);
  // The partials live in the calling thread's scratch; each group's first GEMM assigns (beta 0).
  thread_local std::vector<float> partial_buf;
  if (w_by_columns && partial_buf.size() < size_t(groups * g.o * k)) partial_buf.resize(size_t(groups * g.o * k));
  float* partial = partial_buf.data();
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
      if (w_by_columns) {
        const float* col = x.ptr(n0);
        if (!g.pointwise()) {  // pointwise: nb = 1
          float* c = scratch(0, k * cols);
          gather_columns(c, x, n0, nb, g);
          col = c;
        }
        product(g.bf16, false, true, g.o, k, cols, dy, cols, col, cols, n0 == grp * per ? 0.0f : 1.0f,
                partial + grp * g.o * k, k);
      }
      if (!x_by_columns) continue;
      if (g.pointwise()) {  // nb = 1
        product(g.bf16, true, false, k, ohw, g.o, w.data, k, dy, ohw, 0.0f, d_x.ptr(n0), ohw);
        continue;
      }
      float* dcol = scratch(1, k * cols);
      product(g.bf16, true, false, k, cols, g.o, w.data, k, dy, cols, 0.0f, dcol, cols);
      for (int64_t b = 0; b < nb; ++b) nn::col2im(d_x.ptr(n0 + b), dcol + b * ohw, cols, g);
    }
  });
  if (!w_by_columns) return;
  parallel_for(g.o, [&](int64_t o) {
    float* dw = d_w.ptr(o);
    for (int64_t grp = 0; grp < groups; ++grp) {
      const float* p = partial + (grp * g.o + o) * k;
      for (int64_t i = 0; i < k; ++i) dw[i] += p[i];
    }
  });
}

}  // namespace attnkit
