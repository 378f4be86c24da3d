// Dropout fast path: one Philox call yields the four keep decisions of elements 4k..4k+3 of the
// flattened [T, C] tensor (dropout_keeps is the definition); kept elements are multiplied by
// float(1/(1 - p)). Rows run in parallel; the mask depends only on (seed, stream, index).
// PyTorch: F.dropout(x, p) with this mask.
#include "attnkit/nn/dropout.hpp"

#include <cmath>

#include "attnkit/core/rng.hpp"
#include "nn_common.hpp"

namespace attnkit {
namespace nn {

void check_dropout(const char* fn, const DropoutOptions& opts) {
  check(std::isfinite(opts.p) && opts.p >= 0 && opts.p < 1, fn,
        ": p: expected a value in [0, 1), got ", opts.p);
}

}  // namespace nn

namespace {

// Salt xor-ed into the seed: a different Philox key than attention dropout's for the same seed.
constexpr uint64_t kDropoutKeySalt = 0x6E6E2D64726F7030ull;  // "nn-drop0"

std::array<uint32_t, 4> dropout_words(const DropoutOptions& o, uint64_t group) {
  return philox4x32(o.seed ^ kDropoutKeySalt,
                    {uint32_t(group), uint32_t(group >> 32), o.stream, 0});
}

void apply(View2 out, ConstView2 in, const DropoutOptions& o) {
  const int64_t c = in.shape[1];
  const float scale = float(1.0 / (1.0 - double(o.p)));
  nn::parallel_each_row(in.shape[0], c, [&](int64_t t) {
    const float* x = in.ptr(t);
    float* y = out.ptr(t);
    if (o.p == 0) {  // identity: skip the RNG
      for (int64_t j = 0; j < c; ++j) y[j] = x[j];
      return;
    }
    const uint64_t base = uint64_t(t) * uint64_t(c);
    std::array<uint32_t, 4> words{};
    uint64_t group = ~uint64_t(0);
    for (int64_t j = 0; j < c; ++j) {
      const uint64_t index = base + uint64_t(j);
      if (index / 4 != group) {
        group = index / 4;
        words = dropout_words(o, group);
      }
      y[j] = uniform_from_bits(words[index % 4]) >= o.p ? x[j] * scale : 0.0f;
    }
  });
}

}  // namespace

bool dropout_keeps(const DropoutOptions& opts, uint64_t index) {
  return uniform_from_bits(dropout_words(opts, index / 4)[index % 4]) >= opts.p;
}

void dropout_forward(View2 y, ConstView2 x, const DropoutOptions& opts) {
  nn::check_elementwise("dropout_forward", {{"x", x}, {"y", y}});
  nn::check_dropout("dropout_forward", opts);
  apply(y, x, opts);
}

void dropout_backward(View2 d_x, ConstView2 d_y, const DropoutOptions& opts) {
  nn::check_elementwise("dropout_backward", {{"d_y", d_y}, {"d_x", d_x}});
  nn::check_dropout("dropout_backward", opts);
  apply(d_x, d_y, opts);
}

}  // namespace attnkit
