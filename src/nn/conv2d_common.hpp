// Private: conv2d geometry and argument checks shared by the fast path and the reference.
#pragma once
#include <cstdint>
#include <span>

#include "attnkit/nn/conv2d.hpp"
#include "vision_common.hpp"

namespace attnkit::nn {

struct Conv2dGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input [N, C, H, W]
  int64_t o = 0, kh = 0, kw = 0;       // weight [O, C, KH, KW]
  int64_t oh = 0, ow = 0;              // output [N, O, OH, OW]
  int64_t stride = 1, pad = 0;
  // The call's products in bf16 (MatmulPrecision::kBf16): read once per call by check_conv2d, so
  // every pass and chunk of one call takes the same precision.
  bool bf16 = false;
  // A 1×1, stride-1, unpadded convolution: the image is its own column matrix.
  bool pointwise() const { return kh == 1 && kw == 1 && stride == 1 && pad == 0; }
};

// Validates options and shapes (out is y or d_y, named out_name) and returns the geometry.
Conv2dGeometry check_conv2d(const char* fn, ConstView4 out, const char* out_name, ConstView4 x,
                            ConstView4 w, std::span<const float> b, const Conv2dOptions& opts);

// col[C·KH·KW, OH·OW] from one image x[C, H, W] (zeros where the window leaves the image); ld is
// col's row stride in elements (>= OH·OW: several images' columns can share the rows).
void im2col(float* col, int64_t ld, const float* x, const Conv2dGeometry& g);
// x[C, H, W] = the sum of col's entries over the windows covering each pixel (assigned); ld as
// for im2col.
void col2im(float* x, const float* col, int64_t ld, const Conv2dGeometry& g);

// Per-thread scratch slot `which` (0..2) of at least n floats, grown on demand and kept for the
// next call; shared by the column and Winograd paths, which never hold slots across each other.
float* conv_scratch(int which, int64_t n);

// The fixed reduction groups of a weight gradient over n images: `per` images each (the last may
// have fewer), `count` groups, none empty. A function of n only, so sums never depend on threads.
struct ImageGroups {
  int64_t per, count;
};
ImageGroups weight_gradient_groups(int64_t n);

// True for the convolutions conv2d runs by Winograd F(2×2, 3×3): 3×3, stride 1, padding 1, and at
// least 8 input and 8 output channels, on planes of at least 12×12 or whose 2×2 tiles fit in one
// or two vectors (7×7 with AVX-512 or AVX2).
bool winograd_applies(const Conv2dGeometry& g);
// y[N, O, H, W] = conv(x[N, C, H, W], w) for a geometry winograd_applies to (no bias); w is
// [O, C, 3, 3], or with `flip_transpose` [C, O, 3, 3] used rotated by 180° (the input gradient).
void winograd_conv3x3(View4 y, ConstView4 x, const float* w, bool flip_transpose,
                      const Conv2dGeometry& g);
// True where conv2d computes d_w by Winograd too: as winograd_applies, except planes of one vector
// of tiles. Measured on the CNN's shapes (1 thread, batch 128): 14×14 layers 0.9–1.3× the speed
// of im2col + sgemm (1.2–1.3× with 64 channels), 7×7 layers 0.65–0.85× (16 GEMMs with an inner
// dimension of 64 tiles).
bool winograd_weight_gradient_applies(const Conv2dGeometry& g);
// d_w[O, C, 3, 3] += the weight gradient of that convolution for d_y [N, O, H, W] and x, by
// Winograd F(2×2, 3×3) (the adjoint transforms); deterministic for any thread count.
void winograd_weight_gradient(View4 d_w, ConstView4 d_y, ConstView4 x, const Conv2dGeometry& g);

// oneDNN's direct convolution (conv2d_onednn.cpp). The three directions of conv2d that run by it:
enum class ConvPass { kForward, kBackwardData, kBackwardWeights };
// True where conv2d runs `pass` of geometry g by oneDNN: never without oneDNN or under
// Conv2dEngine::kBuiltin; every supported geometry under kOneDnn; under kAuto the measured classes.
bool onednn_applies(ConvPass pass, const Conv2dGeometry& g);
// y[N, O, OH, OW] = conv(x[N, C, H, W], w[O, C, KH, KW]) (no bias).
void onednn_conv_forward(View4 y, ConstView4 x, const float* w, const Conv2dGeometry& g);
// d_x[N, C, H, W] = the input gradient for d_y[N, O, OH, OW] and w[O, C, KH, KW] (assigned).
void onednn_conv_backward_data(View4 d_x, ConstView4 d_y, const float* w, const Conv2dGeometry& g);
// d_w[O, C, KH, KW] += Σ_n d_y[n] ⋆ x[n], summed over fixed groups of
// kWeightGradientImages images in group order.
void onednn_conv_backward_weights(View4 d_w, ConstView4 d_y, ConstView4 x, const Conv2dGeometry& g);

}  // namespace attnkit::nn
