#pragma once
// An image classifier built on multi-scale deformable attention: a small CNN feature pyramid
// feeds a Deformable DETR encoder (Zhu et al. 2021) whose mean-pooled tokens a linear layer
// classifies. Forward and backward the llm.c way (layers in order, then their backwards in
// reverse; every saved activation explicit), parameters in one flat buffer with names.
//
//   backbone.0:  h₀ = ReLU(BN(conv3×3(x, stride 1, pad 1)))           [N, w₀, S, S]
//   backbone.i:  hᵢ = ReLU(BN(conv3×3(hᵢ₋₁, stride 2, pad 1)))        [N, wᵢ, Sᵢ, Sᵢ], i = 1..Lv
//                (28 → 14 → 7 → 4 for the default widths of length 4)
//   level l = 0..Lv-1 (map h_{l+1}, H_l·W_l pixels): tokens src = input_proj.l(h_{l+1}) (a 1×1
//                convolution, as a linear layer on pixels), pixels row-major, levels concatenated:
//                src [N, T, C], T = Σ_l H_l·W_l (196 + 49 + 16 = 261 for 28×28 images)
//   pos[t] = sine(t) + level_embed[l(t)]        fixed 2-D sine embedding (Deformable DETR's
//                PositionEmbeddingSine(C/2, normalize=True): first C/2 channels from y, last C/2
//                from x, sin/cos interleaved, y = (i + 0.5)/H_l·2π, x = (j + 0.5)/W_l·2π) plus a
//                learned embedding per level, added to the attention query only
//   ref[t]  = ((j + 0.5)/W_l, (i + 0.5)/H_l) for every level (the token's pixel centre)
//   encoder layer k (post-LN, DeformableTransformerEncoderLayer):
//                src = LN₁(src + MSDeformAttn(src + pos, ref, src))
//                src = LN₂(src + linear2(gelu(linear1(src))))          (exact GELU, no dropout)
//   head:        logits = classifier(mean_t src[:, t])                 [N, K]
//
// Names (Deformable DETR's where it has them): backbone.i.conv.weight [wᵢ, wᵢ₋₁, 3, 3] (no bias),
// backbone.i.bn.{weight,bias} (buffers backbone.i.bn.running_{mean,var}), input_proj.l.{weight
// [C, w_{l+1}], bias [C]}, level_embed [Lv, C], encoder.layers.k.self_attn.{value_proj,
// sampling_offsets, attention_weights, output_proj}.{weight, bias}, encoder.layers.k.{norm1,
// linear1 [F, C], linear2 [C, F], norm2}.*, classifier.{weight [K, C], bias [K]}.
// Training mode uses batch statistics in batch norm (and updates the running statistics); there
// is no dropout, so the step seed is unused.
// PyTorch: tests/python/test_deformable_classifier.py writes the same network in torch.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnkit/models/image_classifier.hpp"
#include "attnkit/nn/ms_deform_attn_block.hpp"

namespace attnkit {

struct DeformableConfig {
  int64_t num_channels = 1;                  // Cin
  int64_t image_size = 28;                   // square input side
  int64_t num_labels = 10;                   // K
  std::vector<int64_t> widths{16, 32, 64, 64};  // backbone channels; Lv = len - 1 levels
  int64_t d_model = 64;                      // C, divisible by heads and by 4 (sine embedding)
  int64_t heads = 4;                         // H
  int64_t points = 4;                        // P sampling points per head and level
  int64_t layers = 2;                        // L encoder layers
  int64_t ffn_dim = 128;                     // F
  double layer_norm_eps = 1e-5;
  double batch_norm_eps = 1e-5;
  double batch_norm_momentum = 0.1;
  std::vector<std::string> labels;           // class names (empty or num_labels entries)

  int64_t levels() const { return int64_t(widths.size()) - 1; }  // Lv
};

// Parses config.json text ("model_type": "deformable"); unknown keys, wrong types and values out
// of range throw attnkit::Error naming the key. "levels", if present, must equal len(widths) - 1.
DeformableConfig parse_deformable_config(const std::string& json_text, const std::string& source = "config.json");
// Serialises to config.json text (parse_deformable_config reads it back).
std::string deformable_config_to_json(const DeformableConfig& config);
// Checks ranges; throws attnkit::Error naming the key.
void validate(const DeformableConfig& config);
// Side of every backbone map: [image_size, ⌈image_size/2⌉, ...] (len(widths) entries).
std::vector<int64_t> deformable_map_sizes(const DeformableConfig& config);

class DeformableActivations;  // deformable_activations.hpp: saved activations for one batch size

class DeformableClassifier final
    : public ConfiguredImageClassifier<DeformableConfig, deformable_config_to_json> {
 public:
  explicit DeformableClassifier(const DeformableConfig& config);
  ~DeformableClassifier() override;

  std::string model_type() const override { return "deformable"; }
  ImageShape input_shape() const override;

  // Kaiming-normal convolutions (fan_out, ReLU gain), BN and LN weight 1 / bias 0, running mean 0
  // and variance 1; MSDeformAttn by ms_deform_attn_block_init (Deformable DETR's); level_embed
  // N(0, 1) (Deformable DETR's normal_); every other matrix Xavier-uniform with zero bias.
  void init_random(uint64_t seed) override;
  void set_training(bool training, uint64_t seed = 0) override { training_ = training; }
  // Runs every layer's float64 reference kernel instead of the fast one (conv, linear, norm,
  // GELU, MSDeformAttn; batch norm has one implementation): a whole-model oracle for tests.
  void set_reference(bool reference) { reference_ = reference; }
  ConstView2 forward(ConstView4 x) override;
  void backward(ConstView2 d_logits) override;

 private:
  void build_layout();
  void backbone_forward(ConstView4 x);
  void encoder_forward();  // tokens, layers, head (deformable_encoder.cpp)
  void tokens_forward();
  void layer_forward(int64_t layer);
  void head_forward();
  void encoder_backward(ConstView2 d_logits);  // head, layers, tokens, in reverse
  void head_backward(ConstView2 d_logits);
  void layer_backward(int64_t layer);
  void tokens_backward();
  void backbone_backward();
  MsDeformAttnBlockInputs block_inputs(int64_t layer) const;
  MsDeformAttnBlockOptions block_options() const;
  MsDeformAttnBlockParams block_params(int64_t layer) const;
  MsDeformAttnBlockGrads block_grads(int64_t layer);

  struct BackboneIds {  // one backbone stage: conv3×3 + batch norm
    TensorId conv;
    BatchNormIds bn;
  };
  struct EncoderLayerIds {  // one encoder layer: MSDeformAttn, norm1, FFN, norm2
    LayerIds value_proj, sampling_offsets, attention_weights, output_proj;
    LayerIds norm1, linear1, linear2, norm2;
  };
  std::vector<BackboneIds> backbone_;
  std::vector<LayerIds> input_proj_;  // one per level
  std::vector<EncoderLayerIds> layers_;
  TensorId level_embed_;
  LayerIds classifier_;
  std::vector<int64_t> spatial_shapes_, level_start_;  // [Lv, 2] (H_l, W_l); [Lv]
  std::vector<float> sine_;                            // [T, C] fixed position embedding
  bool training_ = false, reference_ = false;
  std::unique_ptr<DeformableActivations> acts_;
};

}  // namespace attnkit
