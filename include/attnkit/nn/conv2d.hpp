#pragma once
// 2-D convolution over NCHW images (cross-correlation, as deep-learning libraries define it).
// PyTorch: torch.nn.functional.conv2d(x, w, b, stride=s, padding=p).
//   y[n, o, i, j] = b[o] + Σ_{c, u, v} x[n, c, i·s - p + u, j·s - p + v]·w[o, c, u, v]
// with x read as 0 outside the image. Output size: OH = ⌊(H + 2p - KH) / s⌋ + 1 (likewise OW).
//
// Shapes: x, d_x [N, C, H, W]; w, d_w [O, C, KH, KW]; b, d_b [O] or empty (no bias);
// y, d_y [N, O, OH, OW]. Every 4-D view must be contiguous (row-major NCHW).
// Gradient contract (docs/architecture.md): conv2d_backward ADDS (+=) into d_w and d_b and ASSIGNS
// (=) d_x; each gradient is skipped when its view/span is empty.
// Fast path (conv2d.cpp): im2col of a chunk of images (about 512 output pixels in all) into
// per-thread scratch and one sgemm per chunk (ops/gemm.hpp); a 1×1 stride-1 unpadded convolution
// of one image uses the image itself as the column matrix. 3×3, stride-1, padding-1 layers with
// >= 8 input and output channels on planes of at least 12×12, or whose 2×2 tiles fit in one or two
// vectors (7×7 with AVX-512 or AVX2), run by Winograd F(2×2, 3×3) instead (conv2d_winograd.cpp):
// y and d_x on both, d_w on the larger planes.
// When attnkit is built with oneDNN (CMake ATTNKIT_WITH_DNNL), the layer classes where oneDNN's
// direct convolution measured faster run by it instead (conv2d_onednn.cpp; docs/performance.md):
// one single-threaded oneDNN primitive per chunk of images, cached per shape.
// In the bf16 mixed-precision mode (MatmulPrecision::kBf16, ops/matmul_precision.hpp) the inputs
// of every product are rounded to bf16 and summed in float32: oneDNN's bf16 convolution where
// Conv2dEngine picks it (under kAuto: every forward pass, and d_x and d_w of 3×3, stride-1,
// padding-1 layers with >= 16 channels each way), else the im2col path on gemm_bf16; never Winograd.
// Images run in parallel; d_w sums fixed groups of images in a fixed order, so results are
// bitwise identical for any thread count. Reference (conv2d_reference.cpp): direct loops in double.
#include <cstdint>
#include <span>

#include "attnkit/core/scoped_setting.hpp"
#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct Conv2dOptions {
  int64_t stride = 1;   // same in both spatial dimensions, >= 1
  int64_t padding = 0;  // zeros on every side, >= 0
};

// Which implementation conv2d_forward and conv2d_backward use. kAuto: in float32, on CPUs with AMX,
// oneDNN's convolution for the layer classes where it measured faster there, the built-in paths
// elsewhere and on every other CPU (where oneDNN's measured slower or equal); in the bf16 mode,
// oneDNN's bf16 convolution for the passes listed above, on any CPU; kBuiltin: the built-in paths
// only (im2col + sgemm and Winograd; in bf16, im2col + gemm_bf16); kOneDnn: oneDNN for every
// layer it supports. The process-wide default
// is kAuto, or the environment variable ATTNKIT_CONV_ENGINE (auto, builtin, onednn) read once.
enum class Conv2dEngine { kAuto, kBuiltin, kOneDnn };
// Sets the engine for every later call; throws attnkit::Error for kOneDnn when built without oneDNN.
void set_conv2d_engine(Conv2dEngine engine);
// The engine in effect.
Conv2dEngine conv2d_engine();
// True when attnkit was built with oneDNN (CMake ATTNKIT_WITH_DNNL and libdnnl-dev found).
bool conv2d_has_onednn();

// Scoped engine override (restores the previous engine on destruction).
using Conv2dEngineScope = ScopedSetting<Conv2dEngine, conv2d_engine, set_conv2d_engine>;

// Output extent of a convolution or pooling window: ⌊(in + 2·padding - kernel) / stride⌋ + 1
// (0 when the padded input is smaller than the kernel).
int64_t conv2d_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding);

// y[N, O, OH, OW] = conv2d(x[N, C, H, W], w[O, C, KH, KW]) + b[O] (b empty: no bias). A kernel
// larger than the padded input throws, as in PyTorch (the forward and the backward).
void conv2d_forward(View4 y, ConstView4 x, ConstView4 w, std::span<const float> b,
                    const Conv2dOptions& opts = {});
// d_x[N, C, H, W] = conv_transpose(d_y, w) (assigned); d_w[O, C, KH, KW] += Σ_n d_y ⋆ x;
// d_b[O] += Σ_{n, i, j} d_y[n, o, i, j].
void conv2d_backward(View4 d_x, View4 d_w, std::span<float> d_b, ConstView4 d_y, ConstView4 x,
                     ConstView4 w, const Conv2dOptions& opts = {});

// References (direct loops, double accumulation) with the same contracts.
void conv2d_forward_reference(View4 y, ConstView4 x, ConstView4 w, std::span<const float> b,
                              const Conv2dOptions& opts = {});
void conv2d_backward_reference(View4 d_x, View4 d_w, std::span<float> d_b, ConstView4 d_y,
                               ConstView4 x, ConstView4 w, const Conv2dOptions& opts = {});

}  // namespace attnkit
