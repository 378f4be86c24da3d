#pragma once
// MSDeformAttn, the multi-scale deformable attention module of Deformable DETR (Zhu et al. 2021),
// forward and backward, llm.c style (outputs first, saved activations in a cache, no autograd).
// C = d_model = H·Dh; K = Lv·P sampling points per query and head.
//
//   value   = input_flatten·W_vᵀ + b_v                  [B, S, C], zeroed where padding_mask
//   offsets = query·W_offᵀ + b_off                      [B, Q, H, Lv, P, 2] (x, y) in pixels
//   logits  = query·W_awᵀ + b_aw                        [B, Q, H, Lv·P]
//   weights = softmax(logits) over the Lv·P entries of each head
//   loc     = reference_points[b, q, l] + offsets / (W_l, H_l)      normalised (x, y)
//   attn    = ms_deform_attn(value, loc, weights)       [B, Q, C] (attention/ms_deform_attn.hpp)
//   out     = attn·W_oᵀ + b_o                           [B, Q, C]
//
// Parameter names follow Deformable DETR's module (value_proj, sampling_offsets,
// attention_weights, output_proj; weights [out, in] as torch.nn.Linear). Its initialisation
// (ms_deform_attn_block_init): sampling_offsets weight 0 and bias so that head h points along
// angle 2πh/H, the direction scaled to max-norm 1 and multiplied by the point index p + 1 (the
// same for every level); attention_weights weight and bias 0 (uniform weights); value_proj and
// output_proj Xavier-uniform with zero bias.
//
// Gradient contract (docs/architecture.md): the backward ADDS (+=) into parameter gradients and
// ASSIGNS (=) d_query, d_input_flatten and d_reference_points.
// opts.reference runs the float64 reference kernels (linear and sampling), so a whole model can
// be compared reference vs fast; the softmax and the reshapes are shared (double accumulation).
// PyTorch: tests/python/test_ms_deform_attn_block.py writes the module with grid_sample.
#include <cstdint>
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct MsDeformAttnBlockOptions {  // what to compute; no pointers
  int64_t d_model = 256;           // C, divisible by heads
  int64_t heads = 8;               // H
  int64_t levels = 4;              // Lv
  int64_t points = 4;              // P
  bool reference = false;          // float64 reference kernels instead of the fast ones

  int64_t head_dim() const { return d_model / heads; }             // Dh
  int64_t weights_width() const { return heads * levels * points; }   // H·Lv·P
  int64_t offsets_width() const { return 2 * weights_width(); }       // H·Lv·P·2
  // Checks the sizes; throws attnkit::Error naming the field.
  void validate() const;
};

struct MsDeformAttnBlockParams {                // views of the caller's weights
  ConstView2 value_proj_weight;                 // [C, C]
  std::span<const float> value_proj_bias;       // [C]
  ConstView2 sampling_offsets_weight;           // [H·Lv·P·2, C]
  std::span<const float> sampling_offsets_bias; // [H·Lv·P·2]
  ConstView2 attention_weights_weight;          // [H·Lv·P, C]
  std::span<const float> attention_weights_bias;// [H·Lv·P]
  ConstView2 output_proj_weight;                // [C, C]
  std::span<const float> output_proj_bias;      // [C]
};

struct MsDeformAttnBlockGrads {                 // same shapes as the params; +=, empty = skip
  View2 value_proj_weight;
  std::span<float> value_proj_bias;
  View2 sampling_offsets_weight;
  std::span<float> sampling_offsets_bias;
  View2 attention_weights_weight;
  std::span<float> attention_weights_bias;
  View2 output_proj_weight;
  std::span<float> output_proj_bias;
};

// Owning storage for one set of parameters (or their gradients), zero-initialised.
struct MsDeformAttnBlockWeights {
  Tensor<float, 2> value_proj_weight, sampling_offsets_weight, attention_weights_weight,
      output_proj_weight;
  Tensor<float, 1> value_proj_bias, sampling_offsets_bias, attention_weights_bias,
      output_proj_bias;

  explicit MsDeformAttnBlockWeights(const MsDeformAttnBlockOptions& opts);
  MsDeformAttnBlockParams params() const;
  MsDeformAttnBlockGrads grads();
};

// Deformable DETR's initialisation of `w` (see the file comment); Xavier draws from `seed`.
void ms_deform_attn_block_init(MsDeformAttnBlockWeights& w, const MsDeformAttnBlockOptions& opts,
                               uint64_t seed);

struct MsDeformAttnBlockInputs {                // where the data is; all contiguous
  View<const float, 3> query;                   // [B, Q, C] (with positional embedding added)
  View<const float, 4> reference_points;        // [B, Q, Lv, 2], (x, y) normalised to [0, 1]
  View<const float, 3> input_flatten;           // [B, S, C], levels concatenated along S
  std::span<const int64_t> spatial_shapes;      // [Lv, 2] row-major (H_l, W_l)
  std::span<const int64_t> level_start_index;   // [Lv]
  std::span<const uint8_t> padding_mask;        // [B·S], nonzero = padding (value zeroed); or empty
};

struct MsDeformAttnBlockCache {                 // written by the forward, read by the backward
  Tensor<float, 2> value;                       // [B·S, C] after the mask
  Tensor<float, 2> offsets;                     // [B·Q, H·Lv·P·2] (kept for inspection)
  Tensor<float, 2> weights;                     // [B·Q, H·Lv·P] after the softmax
  Tensor<float, 2> locations;                   // [B·Q, H·Lv·P·2] sampling locations
  Tensor<float, 2> attn;                        // [B·Q, C] before output_proj
};

// Checks inputs and params against opts; throws attnkit::Error naming the argument.
void validate_ms_deform_attn_block(const MsDeformAttnBlockInputs& in,
                                   const MsDeformAttnBlockParams& params,
                                   const MsDeformAttnBlockOptions& opts);

// out[B, Q, C] = MSDeformAttn(in); fills cache (allocated to size here).
void ms_deform_attn_block_forward(View3 out, MsDeformAttnBlockCache& cache,
                                  const MsDeformAttnBlockInputs& in,
                                  const MsDeformAttnBlockParams& params,
                                  const MsDeformAttnBlockOptions& opts);

// Input gradients (assigned; an empty view is skipped) and parameter gradients (+=) from
// d_out[B, Q, C] and the forward's inputs and cache.
void ms_deform_attn_block_backward(View3 d_query, View3 d_input_flatten,
                                   View<float, 4> d_reference_points,
                                   const MsDeformAttnBlockGrads& grads, ConstView3 d_out,
                                   const MsDeformAttnBlockInputs& in,
                                   const MsDeformAttnBlockCache& cache,
                                   const MsDeformAttnBlockParams& params,
                                   const MsDeformAttnBlockOptions& opts);

}  // namespace attnkit
