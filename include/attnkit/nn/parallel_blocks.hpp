#pragma once
// Element-wise passes over fixed blocks on the thread pool, shared by the nn layers, the models
// and the trainers. Blocks depend only on the sizes, never on the thread count, so results are
// the same for any number of threads.
#include <cstdint>
#include <functional>
#include <span>

namespace attnkit::nn {

// Calls body(t0, t1) over [0, n) in blocks sized so each holds about kElems elements of width
// `width`; blocks depend only on (n, width), never on the thread count.
void parallel_rows(int64_t n, int64_t width, const std::function<void(int64_t, int64_t)>& body);

// Calls row(t) for every t in [0, n), in parallel_rows's blocks.
template <class Row>
void parallel_each_row(int64_t n, int64_t width, Row&& row) {
  parallel_rows(n, width, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) row(t);
  });
}

// v[i] = value for every i, in parallel blocks (zeroing a model's gradients every step).
void parallel_fill(std::span<float> v, float value);
// Index of the first non-finite (inf or NaN) value of v, or -1: a branch-free pass over parallel
// blocks, then a scan of the first block that has one.
int64_t first_non_finite(std::span<const float> v);

}  // namespace attnkit::nn
