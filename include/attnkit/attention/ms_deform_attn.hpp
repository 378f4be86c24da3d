#pragma once
// Multi-scale deformable attention (Deformable DETR, Zhu et al. 2021, eq. 3): each query samples
// P points per head on each of Lv feature-map levels by bilinear interpolation and mixes them with
// its attention weights, so the cost is O(Q·H·Lv·P·Dh) instead of O(Q·S·Dh).
//
//   out[b, q, h·Dh + d] = Σ_{l, p} w[b, q, h, l, p] · bilinear(value level l of (b, h), loc[b, q, h, l, p])[d]
//
// Sampling follows torch.nn.functional.grid_sample(mode='bilinear', padding_mode='zeros',
// align_corners=False) with grid = 2·loc - 1: a location (x, y) in [0, 1]² (x along the width)
// maps to pixel coordinates (x·W_l - 0.5, y·H_l - 0.5), pixel centres sit at (i + 0.5)/W_l, and
// the four neighbouring pixels that fall outside the map read as zero. At integer pixel
// coordinates (a kink of the interpolant) the location gradient is the one-sided derivative
// toward +x / +y, as grid_sample's (corners floor(c) and floor(c) + 1).
//
// NaN policy: a non-finite sampling location samples nothing (as a point far outside the map):
// it contributes zero and gets zero gradients. NaN or inf in value, attention weights or d_out
// propagate by IEEE arithmetic into the outputs they touch.
//
// Gradient contract (docs/architecture.md): the backward ASSIGNS (=) d_value,
// d_sampling_locations and d_attention_weights (all are input gradients).
// Fast path (ms_deform_attn.cpp): parallel over (batch, query), vectorised over Dh; the backward
// scatters into d_value in partitions (batch, head, channel block) owned by one work item each,
// visiting queries in order, so results are bitwise identical for any thread count.
// Reference (ms_deform_attn_reference.cpp): scalar loops, double accumulation, the spec.
#include <cstdint>
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct MsDeformAttnArgs {                          // where the data is
  View<const float, 4> value;                      // [B, S, H, Dh], levels concatenated along S
  std::span<const int64_t> spatial_shapes;         // [Lv, 2] row-major: (H_l, W_l), each >= 1
  std::span<const int64_t> level_start_index;      // [Lv]: 0, H_0·W_0, ...; Σ H_l·W_l = S
  View<const float, 6> sampling_locations;         // [B, Q, H, Lv, P, 2]: (x, y), normalised
  View<const float, 5> attention_weights;          // [B, Q, H, Lv, P]
  View3 out;                                       // [B, Q, H·Dh]; written by the forward
};

struct MsDeformAttnGrads {                         // backward: d_out in, the rest assigned
  ConstView3 d_out;                                // [B, Q, H·Dh]
  View<float, 4> d_value;                          // [B, S, H, Dh]
  View<float, 6> d_sampling_locations;             // [B, Q, H, Lv, P, 2]
  View<float, 5> d_attention_weights;              // [B, Q, H, Lv, P]
};

// Fast forward: writes args.out. Bitwise identical for any thread count.
void ms_deform_attn(const MsDeformAttnArgs& args);
// Fast backward: assigns the three gradients of grads from grads.d_out (args.out is not read).
void ms_deform_attn_backward(const MsDeformAttnArgs& args, const MsDeformAttnGrads& grads);

// Reference forward (scalar, double accumulation): same contract as ms_deform_attn.
void ms_deform_attn_reference(const MsDeformAttnArgs& args);
// Reference backward (scalar, double accumulation): same contract as ms_deform_attn_backward.
void ms_deform_attn_reference_backward(const MsDeformAttnArgs& args,
                                       const MsDeformAttnGrads& grads);

// Checks shapes, strides, spatial_shapes and level_start_index (consistency with S) and the
// output view; throws attnkit::Error naming the argument. args.out may be empty when `need_out`
// is false (backward).
void validate(const MsDeformAttnArgs& args, bool need_out = true);
// Checks the gradient views against args; throws attnkit::Error naming the argument.
void validate_backward(const MsDeformAttnArgs& args, const MsDeformAttnGrads& grads);

// Bilinear corner weights of one sampling location on a level of size (h, w), computed in
// double so the pixel coordinates x·w - 0.5 and y·h - 0.5 are exact for float inputs.
// x0, y0: top-left corner (may be -1 or the last row/column + 1 near borders); lx, ly: fractional
// offsets in [0, 1). `valid` is false when no corner is inside the map (far outside or NaN).
struct BilinearCorners {
  int64_t x0 = 0, y0 = 0;
  double lx = 0, ly = 0;
  bool valid = false;
};
BilinearCorners bilinear_corners(float x, float y, int64_t h, int64_t w);

}  // namespace attnkit
