// Rotary embedding fast path: per token, cos and sin of a_i = p·inv_freq[i] are evaluated once in
// double and rounded to float (read from the shared table for positions below 65536), then every
// head of the token is rotated in float by ops/rope.hpp's rope_rotate (pairs (i, i+D/2), Hugging
// Face's rotate_half), the function and cos/sin rounding the decode kernel's rope-on-read also
// uses. The backward is the same rotation with sin negated (R(-a) = R(a)ᵀ). PyTorch:
// x * cos + rotate_half(x) * sin.
#include "attnkit/nn/rope.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "attnkit/ops/rope.hpp"
#include "nn_common.hpp"

namespace attnkit {
namespace nn {

void check_rope(const char* fn, const View3& x, std::span<const int64_t> positions,
                const RopeOptions& opts) {
  const int64_t t = x.shape[0], h = x.shape[1], d = x.shape[2];
  check(d % 2 == 0, fn, ": x: head dimension D must be even, got D = ", d);
  check(x.data != nullptr || x.numel() == 0, fn, ": x: null data for a non-empty view");
  check(x.stride[2] == 1 || d <= 1, fn, ": x: last dimension must be contiguous (stride 1), got ",
        x.stride[2]);
  check(h <= 1 || x.stride[1] >= d, fn, ": x: head stride ", x.stride[1],
        " is smaller than D = ", d);
  check(int64_t(positions.size()) == t, fn, ": positions: expected [T] = ", t, " elements, got ",
        positions.size());
  for (size_t i = 0; i < positions.size(); ++i)
    check(positions[i] >= 0, fn, ": positions[", i, "] = ", positions[i], " is negative");
  check(std::isfinite(opts.theta) && opts.theta > 0, fn,
        ": theta: expected a finite value > 0, got ", opts.theta);
}

}  // namespace nn

std::vector<double> rope_inv_freq(int64_t head_dim, const RopeOptions& opts) {
  check(head_dim >= 0 && head_dim % 2 == 0, "rope_inv_freq: head_dim must be even and >= 0, got ",
        head_dim);
  std::vector<double> f(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i)
    f[size_t(i)] = std::pow(opts.theta, -2.0 * double(i) / double(head_dim));
  return f;
}

namespace {

// Positions below this read cos/sin from the shared RopeTable (ops/rope.hpp: the same double
// evaluation, rounded once, so bitwise the values computed here); larger ones, which would make
// the table large, are evaluated per token.
constexpr int64_t kTablePositions = int64_t(1) << 16;

void rotate(View3 x, std::span<const int64_t> positions, const RopeOptions& opts, double sign) {
  const int64_t h = x.shape[1], half = x.shape[2] / 2;
  const std::vector<double> inv_freq = rope_inv_freq(x.shape[2], opts);
  const int64_t most = positions.empty() ? 0 : *std::max_element(positions.begin(), positions.end());
  const std::shared_ptr<const RopeTable> table =
      half >= 1 && most < kTablePositions ? rope_table_for(x.shape[2], opts.theta, most + 1) : nullptr;
  nn::parallel_rows(x.shape[0], h * x.shape[2], [&](int64_t t0, int64_t t1) {
    std::vector<float> cs(table ? 0 : size_t(2 * half));
    for (int64_t t = t0; t < t1; ++t) {
      const float *cos = cs.data(), *sin = cs.data() + half;
      if (table) {
        cos = table->cos(positions[size_t(t)]), sin = table->sin(positions[size_t(t)]);
      } else {
        const double p = double(positions[size_t(t)]);
        for (int64_t i = 0; i < half; ++i) {
          const double a = p * inv_freq[size_t(i)];
          cs[size_t(i)] = float(std::cos(a));
          cs[size_t(half + i)] = float(std::sin(a));
        }
      }
      for (int64_t hh = 0; hh < h; ++hh) rope_rotate(x.ptr(t, hh), x.shape[2], cos, sin, float(sign));
    }
  });
}

}  // namespace

void rope_forward(View3 x, std::span<const int64_t> positions, const RopeOptions& opts) {
  nn::check_rope("rope_forward", x, positions, opts);
  rotate(x, positions, opts, 1.0);
}

void rope_backward(View3 d, std::span<const int64_t> positions, const RopeOptions& opts) {
  nn::check_rope("rope_backward", d, positions, opts);
  rotate(d, positions, opts, -1.0);
}

}  // namespace attnkit
