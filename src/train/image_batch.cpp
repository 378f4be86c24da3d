// Image mini-batches with seeded crop-and-flip augmentation (see image_batch.hpp).
// For image index i the crop offsets (dy, dx) in [0, 2·pad] and the flip bit come from
// philox(seed, {i, epoch, 0, 0}); output pixel (r, c) reads source pixel
// (r + dy - pad, c' + dx - pad) with c' = cols - 1 - c when flipped, 0 outside the image.
#include "attnkit/train/image_batch.hpp"

#include <cmath>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/core/rng.hpp"

namespace attnkit {

std::pair<double, double> pixel_mean_std(const ImageDataset& ds) {
  check(!ds.images.empty(), "pixel_mean_std: ds: no pixels");
  double s = 0, q = 0;
  for (uint8_t p : ds.images) {
    const double v = p / 255.0;
    s += v;
    q += v * v;
  }
  const double n = double(ds.images.size()), mean = s / n;
  return {mean, std::sqrt(std::max(0.0, q / n - mean * mean))};
}

void image_batch(View4 x, std::span<int32_t> labels, const ImageDataset& ds,
                 std::span<const int64_t> indices, const ImageBatchOptions& opts) {
  const char* fn = "image_batch";
  const int64_t b = int64_t(indices.size()), rows = ds.rows, cols = ds.cols;
  check(x.shape[0] == b && x.shape[1] == 1 && x.shape[2] == rows && x.shape[3] == cols, fn,
        ": x: expected shape [B, 1, rows, cols] = [", b, ", 1, ", rows, ", ", cols, "], got [",
        x.shape[0], ", ", x.shape[1], ", ", x.shape[2], ", ", x.shape[3], "]");
  check(x.stride[3] == 1 && x.stride[2] == cols && (x.stride[0] == rows * cols || b <= 1), fn,
        ": x: must be contiguous");
  check(int64_t(labels.size()) == b, fn, ": labels: expected ", b, " elements, got ", labels.size());
  check(opts.std > 0 && std::isfinite(opts.std) && std::isfinite(opts.mean), fn,
        ": std: expected a finite value > 0, got ", opts.std);
  check(opts.pad >= 0 && opts.pad <= std::max(rows, cols), fn, ": pad: expected 0..",
        std::max(rows, cols), ", got ", opts.pad);
  for (int64_t i = 0; i < b; ++i)
    check(indices[size_t(i)] >= 0 && indices[size_t(i)] < ds.count, fn, ": indices[", i, "] = ",
          indices[size_t(i)], " outside [0, ", ds.count, ")");
  const float scale = 1.0f / (255.0f * opts.std), shift = -opts.mean / opts.std;
  parallel_for(b, [&](int64_t i) {
    const int64_t idx = indices[size_t(i)];
    const auto bits = philox4x32(opts.seed, {uint32_t(idx), uint32_t(idx >> 32), uint32_t(opts.epoch),
                                             uint32_t(opts.epoch >> 32)});
    const int64_t span = 2 * opts.pad + 1;
    const int64_t dy = opts.pad ? int64_t(bits[0] % uint32_t(span)) - opts.pad : 0;
    const int64_t dx = opts.pad ? int64_t(bits[1] % uint32_t(span)) - opts.pad : 0;
    const bool flip = opts.flip && (bits[2] & 1u);
    const uint8_t* src = ds.images.data() + idx * rows * cols;
    float* out = x.ptr(i);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t sr = r + dy, sc = (flip ? cols - 1 - c : c) + dx;
        const bool inside = sr >= 0 && sr < rows && sc >= 0 && sc < cols;
        out[r * cols + c] = (inside ? float(src[sr * cols + sc]) : 0.0f) * scale + shift;
      }
    labels[size_t(i)] = ds.labels[size_t(idx)];
  });
}

}  // namespace attnkit
