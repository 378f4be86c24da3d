// Private helpers shared by the NCHW layers (conv2d, pooling, batch norm, SE, CBAM): shape checks
// that name the function and the argument, and plane-parallel loops.
#pragma once
#include <cstdint>
#include <span>

#include "attnkit/core/error.hpp"
#include "attnkit/core/tensor.hpp"
#include "hwy/highway.h"

namespace attnkit::nn {

// Checks that v is a contiguous [n, c, h, w] view (with data unless empty).
template <class T>
void check_nchw(const View<T, 4>& v, const char* fn, const char* name, const char* dims,
                int64_t n, int64_t c, int64_t h, int64_t w) {
  check(v.shape[0] == n && v.shape[1] == c && v.shape[2] == h && v.shape[3] == w, fn, ": ", name,
        ": expected shape ", dims, " = [", n, ", ", c, ", ", h, ", ", w, "], got [", v.shape[0],
        ", ", v.shape[1], ", ", v.shape[2], ", ", v.shape[3], "]");
  check(v.data != nullptr || n * c * h * w == 0, fn, ": ", name, ": null data for a non-empty view");
  const bool contiguous = (v.stride[3] == 1 || w <= 1) && (v.stride[2] == w || h <= 1) &&
                          (v.stride[1] == h * w || c <= 1) && (v.stride[0] == c * h * w || n <= 1);
  check(contiguous, fn, ": ", name, ": must be contiguous NCHW, got strides [", v.stride[0], ", ",
        v.stride[1], ", ", v.stride[2], ", ", v.stride[3], "]");
}

// True if an optional 4-D output was given.
template <class T>
bool present4(const View<T, 4>& v) {
  return v.data != nullptr;
}

// Checks a positive-extent argument.
inline void check_positive(const char* fn, const char* name, int64_t v) {
  check(v >= 1, fn, ": ", name, ": expected >= 1, got ", v);
}

// Checks that a KH×KW kernel fits in an H×W plane padded by `padding` on each side, as PyTorch
// does (a larger kernel would give an empty output).
inline void check_kernel_fits(const char* fn, int64_t kh, int64_t kw, int64_t h, int64_t w, int64_t padding) {
  const __int128 ph = __int128(h) + 2 * __int128(padding), pw = __int128(w) + 2 * __int128(padding);
  // A failing check has ph or pw below an int64 kernel size, so both print as int64.
  check(kh <= ph && kw <= pw, fn, ": kernel ", kh, "×", kw, " is larger than the padded input ", int64_t(ph), "×",
        int64_t(pw));
}

// Throws attnkit::Error naming the first entry of `argmax` outside [0, hw). The common case (all
// valid) is one branch-free, vectorisable pass: a check per entry cost a pool's backward more
// than its own work.
inline void check_argmax(const char* fn, std::span<const int32_t> argmax, int64_t hw) {
  const uint32_t limit = hw > int64_t(UINT32_MAX) ? UINT32_MAX : uint32_t(hw);  // negatives wrap above it
  uint32_t bad = 0;
  for (const int32_t a : argmax) bad |= uint32_t(uint32_t(a) >= limit);
  if (bad == 0) return;
  for (const int32_t a : argmax)
    check(a >= 0 && a < hw, fn, ": argmax: index ", a, " outside the ", hw, "-pixel plane");
}

// The running-maximum rule of the max pools (PyTorch's): v, coming later than best, replaces it
// if it is larger, or if it is the first NaN. Bitwise operators, so that loops over it vectorise.
inline bool later_wins(float best, float v) { return (v > best) | ((v != v) & (best == best)); }
// The same rule lane by lane.
template <class D, class V>
HWY_INLINE auto later_wins(D, V best, V v) {
  namespace hn = hwy::HWY_NAMESPACE;
  return hn::Or(hn::Gt(v, best), hn::AndNot(hn::IsNaN(best), hn::IsNaN(v)));
}

// Index of the first maximum of in[0, n) (n >= 1), where the first NaN beats every number, as
// PyTorch's max does (global_pool.cpp).
int64_t plane_argmax(const float* in, int64_t n);
// y = x ⊙ gate[n, c] per (n, c) plane (se_block.cpp; shared with CBAM's channel gate).
void scale_planes(View4 y, ConstView4 x, ConstView2 gate);
// d_u[n, c] = (Σ_hw d_y⊙x)·a·(1 - a) with a = gate[n, c]: the gradient through y = x⊙σ(u).
void gate_gradient(View2 d_u, ConstView4 d_y, ConstView4 x, ConstView2 gate);

}  // namespace attnkit::nn
