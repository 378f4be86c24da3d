// conv2d reference: direct loops in double, the executable spec of conv2d.hpp.
//   y[n, o, i, j] = b[o] + Σ_{c, u, v} x[n, c, i·s - p + u, j·s - p + v]·w[o, c, u, v]
//   d_x[n, c, h, w'] = Σ over every (o, i, j, u, v) whose window reads (h, w') of d_y·w
//   d_w[o, c, u, v] += Σ_{n, i, j} d_y[n, o, i, j]·x[n, c, i·s - p + u, j·s - p + v]
//   d_b[o] += Σ_{n, i, j} d_y[n, o, i, j]
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "conv2d_common.hpp"
#include "nn_common.hpp"

namespace attnkit {

void conv2d_forward_reference(View4 y, ConstView4 x, ConstView4 w, std::span<const float> b,
                              const Conv2dOptions& opts) {
  const auto g = nn::check_conv2d("conv2d_forward_reference", y, "y", x, w, b, opts);
  parallel_for(g.n * g.o, [&](int64_t no) {
    const int64_t n = no / g.o, o = no % g.o;
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; ++j) {
        double acc = b.empty() ? 0.0 : double(b[size_t(o)]);
        for (int64_t c = 0; c < g.c; ++c)
          for (int64_t u = 0; u < g.kh; ++u)
            for (int64_t v = 0; v < g.kw; ++v) {
              const int64_t hi = i * g.stride - g.pad + u, wi = j * g.stride - g.pad + v;
              if (hi >= 0 && hi < g.h && wi >= 0 && wi < g.w)
                acc += double(x(n, c, hi, wi)) * double(w(o, c, u, v));
            }
        y(n, o, i, j) = float(acc);
      }
  });
}

void conv2d_backward_reference(View4 d_x, View4 d_w, std::span<float> d_b, ConstView4 d_y,
                               ConstView4 x, ConstView4 w, const Conv2dOptions& opts) {
  const char* fn = "conv2d_backward_reference";
  const auto g = nn::check_conv2d(fn, d_y, "d_y", x, w, {}, opts);
  nn::check_span(std::span<const float>(d_b), fn, "d_b", "[O]", g.o, true);
  if (nn::present4(d_x)) nn::check_nchw(d_x, fn, "d_x", "[N, C, H, W]", g.n, g.c, g.h, g.w);
  if (nn::present4(d_w)) nn::check_nchw(d_w, fn, "d_w", "[O, C, KH, KW]", g.o, g.c, g.kh, g.kw);
  if (nn::present4(d_x))
    parallel_for(g.n, [&](int64_t n) {  // each image scatters into its own double buffer
      std::vector<double> acc(size_t(g.c * g.h * g.w), 0.0);
      for (int64_t o = 0; o < g.o; ++o)
        for (int64_t i = 0; i < g.oh; ++i)
          for (int64_t j = 0; j < g.ow; ++j)
            for (int64_t c = 0; c < g.c; ++c)
              for (int64_t u = 0; u < g.kh; ++u)
                for (int64_t v = 0; v < g.kw; ++v) {
                  const int64_t hi = i * g.stride - g.pad + u, wi = j * g.stride - g.pad + v;
                  if (hi >= 0 && hi < g.h && wi >= 0 && wi < g.w)
                    acc[size_t((c * g.h + hi) * g.w + wi)] +=
                        double(d_y(n, o, i, j)) * double(w(o, c, u, v));
                }
      for (int64_t c = 0; c < g.c; ++c)
        for (int64_t h = 0; h < g.h; ++h)
          for (int64_t v = 0; v < g.w; ++v) d_x(n, c, h, v) = float(acc[size_t((c * g.h + h) * g.w + v)]);
    });
  parallel_for(g.o, [&](int64_t o) {
    for (int64_t c = 0; c < g.c && nn::present4(d_w); ++c)
      for (int64_t u = 0; u < g.kh; ++u)
        for (int64_t v = 0; v < g.kw; ++v) {
          double acc = 0;
          for (int64_t n = 0; n < g.n; ++n)
            for (int64_t i = 0; i < g.oh; ++i)
              for (int64_t j = 0; j < g.ow; ++j) {
                const int64_t hi = i * g.stride - g.pad + u, wi = j * g.stride - g.pad + v;
                if (hi >= 0 && hi < g.h && wi >= 0 && wi < g.w)
                  acc += double(d_y(n, o, i, j)) * double(x(n, c, hi, wi));
              }
          d_w(o, c, u, v) = float(double(d_w(o, c, u, v)) + acc);
        }
    if (!d_b.empty()) {
      double acc = 0;
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t i = 0; i < g.oh; ++i)
          for (int64_t j = 0; j < g.ow; ++j) acc += double(d_y(n, o, i, j));
      d_b[size_t(o)] = float(double(d_b[size_t(o)]) + acc);
    }
  });
}

}  // namespace attnkit
