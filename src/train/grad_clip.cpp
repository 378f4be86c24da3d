// Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_), with a thread-count-independent
// double-precision norm: fixed chunks, partial sums added in a fixed order.
#include "attnkit/train/grad_clip.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"

namespace attnkit {
namespace {

constexpr size_t kClipChunk = size_t(1) << 14;

struct Chunk {
  const float* data;
  size_t n;
};

// Σ x² in double over n floats: eight running sums (element i into sum i mod 8, so the compiler
// can keep them in vector lanes without reassociating), added in a fixed order at the end.
double sum_of_squares(const float* x, size_t n) {
  constexpr size_t kLanes = 8;
  double s[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) s[j] += double(x[i + j]) * double(x[i + j]);
  for (; i < n; ++i) s[i % kLanes] += double(x[i]) * double(x[i]);
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

template <class T>
double norm_of(std::span<const std::span<T>> grads) {
  std::vector<Chunk> chunks;
  for (const auto& g : grads)
    for (size_t b = 0; b < g.size(); b += kClipChunk)
      chunks.push_back({g.data() + b, std::min(kClipChunk, g.size() - b)});
  std::vector<double> partial(chunks.size(), 0.0);
  parallel_for(int64_t(chunks.size()), [&](int64_t c) {
    const Chunk& ch = chunks[size_t(c)];
    partial[size_t(c)] = sum_of_squares(ch.data, ch.n);
  });
  double total = 0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

}  // namespace

double global_grad_norm(std::span<const std::span<const float>> grads) { return norm_of(grads); }

double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm) {
  const double norm = norm_of(grads);
  scale_to_max_norm(grads, max_norm, norm);
  return norm;
}

void scale_to_max_norm(std::span<const std::span<float>> grads, double max_norm, double norm) {
  check(max_norm > 0 && std::isfinite(max_norm), "clip_grad_norm: max_norm must be finite and "
        "> 0, got ", max_norm);
  if (!std::isfinite(norm)) return;
  const double coef = max_norm / (norm + 1e-6);  // torch's epsilon
  if (coef < 1.0) {
    const float scale = float(coef);
    for (const auto& g : grads)
      parallel_for(int64_t((g.size() + kClipChunk - 1) / kClipChunk), [&](int64_t c) {
        const size_t end = std::min(g.size(), size_t(c + 1) * kClipChunk);
        for (size_t i = size_t(c) * kClipChunk; i < end; ++i) g[i] *= scale;
      });
  }
}

}  // namespace attnkit
