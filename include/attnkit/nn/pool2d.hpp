#pragma once
// Max and average pooling over NCHW images with a square window (kernel, stride, padding).
// PyTorch: torch.nn.functional.max_pool2d(x, k, s, p) and avg_pool2d(x, k, s, p,
// count_include_pad=...), ceil_mode=False. Output size: OH = ⌊(H + 2p - k) / s⌋ + 1.
//   max: y = max over the window's in-image pixels (padding never wins, as -inf in PyTorch);
//        argmax[n, c, i, j] = h·W + w of the first maximum in row-major window order.
//   avg: y = Σ window / k² with count_include_pad (zeros from the padding count), else
//        / (number of in-image pixels in the window).
//
// Shapes: x, d_x [N, C, H, W]; y, d_y [N, C, OH, OW]; argmax int32 [N·C·OH·OW] (row-major
// [N, C, OH, OW], saved by the forward for the backward). All 4-D views contiguous NCHW.
// Requires 2p <= k (PyTorch's rule, so every window holds at least one pixel).
// Backward ASSIGNS (=) d_x (pooling has no parameters). Planes run in parallel and each output
// gradient is scattered by the thread that owns its plane: deterministic for any thread count.
#include <array>
#include <cstdint>
#include <functional>
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct Pool2dOptions {
  int64_t kernel = 2;             // window side, >= 1
  int64_t stride = 0;             // 0 → kernel (PyTorch's default)
  int64_t padding = 0;            // >= 0, 2·padding <= kernel
  bool count_include_pad = true;  // avg only: divide by k² (true) or by the in-image count
};

// y[N, C, OH, OW] = max over each window of x[N, C, H, W]; argmax[N·C·OH·OW] = h·W + w.
void max_pool2d_forward(View4 y, std::span<int32_t> argmax, ConstView4 x,
                        const Pool2dOptions& opts);
// max_pool2d_forward of max(x·scale[c] + shift[c], 0) (one fused multiply-add per value) without
// storing that map: a batch norm with ReLU (batch_norm2d_scale_shift) and the pool in one read of
// x, bitwise the same y and argmax as batch_norm2d_forward with relu followed by max_pool2d_forward.
void max_pool2d_affine_relu_forward(View4 y, std::span<int32_t> argmax, ConstView4 x,
                                    std::span<const float> scale, std::span<const float> shift,
                                    const Pool2dOptions& opts);
// max_pool2d_forward of an input [N, C, H, W] (x_shape) that is never stored: make_plane(p, out)
// writes its plane p (= n·C + c; H·W values, row-major) into out, a per-thread buffer the pool
// then reads from cache. Called once per plane, from attnkit's threads.
void max_pool2d_forward_of(View4 y, std::span<int32_t> argmax, const std::array<int64_t, 4>& x_shape,
                           const Pool2dOptions& opts, const std::function<void(int64_t, float*)>& make_plane);
// d_x[N, C, H, W] = scatter of d_y to the saved argmax positions (assigned; zeros elsewhere).
void max_pool2d_backward(View4 d_x, ConstView4 d_y, std::span<const int32_t> argmax);

// y[N, C, OH, OW] = mean over each window of x[N, C, H, W] (divisor per count_include_pad).
void avg_pool2d_forward(View4 y, ConstView4 x, const Pool2dOptions& opts);
// d_x[N, C, H, W] = Σ over windows covering the pixel of d_y / divisor (assigned).
void avg_pool2d_backward(View4 d_x, ConstView4 d_y, const Pool2dOptions& opts);

}  // namespace attnkit
