// Rotary embedding reference: for every token, head and pair (i, i + D/2), the rotation by
// a_i = p·theta^(-2i/D) evaluated entirely in double:
//   x'[i] = x[i]·cos a_i - x[i + D/2]·sin a_i,   x'[i + D/2] = x[i + D/2]·cos a_i + x[i]·sin a_i
// and the backward d_x = R(-a)·d_y (the same with sin negated).
#include <cmath>

#include "attnkit/nn/rope.hpp"
#include "nn_common.hpp"

namespace attnkit {
namespace {

void rotate_reference(View3 x, std::span<const int64_t> positions, const RopeOptions& opts,
                      double sign) {
  const int64_t half = x.shape[2] / 2;
  for (int64_t t = 0; t < x.shape[0]; ++t)
    for (int64_t h = 0; h < x.shape[1]; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double inv_freq = std::pow(opts.theta, -2.0 * double(i) / double(x.shape[2]));
        const double a = double(positions[size_t(t)]) * inv_freq;
        const double c = std::cos(a), s = sign * std::sin(a);
        const double lo = double(x(t, h, i)), hi = double(x(t, h, i + half));
        x(t, h, i) = float(lo * c - hi * s);
        x(t, h, i + half) = float(hi * c + lo * s);
      }
}

}  // namespace

void rope_forward_reference(View3 x, std::span<const int64_t> positions, const RopeOptions& opts) {
  nn::check_rope("rope_forward_reference", x, positions, opts);
  rotate_reference(x, positions, opts, 1.0);
}

void rope_backward_reference(View3 d, std::span<const int64_t> positions, const RopeOptions& opts) {
  nn::check_rope("rope_backward_reference", d, positions, opts);
  rotate_reference(d, positions, opts, -1.0);
}

}  // namespace attnkit
