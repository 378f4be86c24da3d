#pragma once
// Global average and max pooling: one value per (image, channel) plane of NCHW activations.
// PyTorch: x.mean(dim=(2, 3)) and x.amax(dim=(2, 3)) (amax's gradient goes to the first
// maximum here, to every tied maximum in PyTorch; ties have probability 0 on continuous data).
//
// Shapes: x, d_x [N, C, H, W] (contiguous NCHW); y, d_y [N, C] (rows contiguous); argmax int32
// [N·C] (h·W + w of each plane's first maximum, saved by the forward). Backward ASSIGNS (=) d_x.
// Sums run in double per plane; planes run in parallel: deterministic for any thread count.
#include <cstdint>
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

// y[n, c] = mean_{h, w} x[n, c, h, w].
void global_avg_pool_forward(View2 y, ConstView4 x);
// d_x[n, c, h, w] = d_y[n, c] / (H·W) (assigned).
void global_avg_pool_backward(View4 d_x, ConstView2 d_y);

// y[n, c] = max_{h, w} x[n, c, h, w]; argmax[n·C + c] = h·W + w of the first maximum.
void global_max_pool_forward(View2 y, std::span<int32_t> argmax, ConstView4 x);
// d_x[n, c, h, w] = d_y[n, c] at argmax, 0 elsewhere (assigned).
void global_max_pool_backward(View4 d_x, ConstView2 d_y, std::span<const int32_t> argmax);

}  // namespace attnkit
