#pragma once
// Vision Transformer (Dosovitskiy et al. 2021) for image classification, as Hugging Face's
// ViTForImageClassification (pre-LN encoder), forward and backward the llm.c way (layers in
// order, then their backwards in reverse, every saved activation explicit). Parameters and
// gradients each live in one flat float buffer addressed by Hugging Face tensor names:
//   vit.embeddings.cls_token [1, 1, C], vit.embeddings.position_embeddings [1, S, C] (S = Np + 1)
//   vit.embeddings.patch_embeddings.projection.{weight [C, Cin, P, P], bias [C]}
//   vit.encoder.layer.N.layernorm_before.{weight, bias} [C]
//   vit.encoder.layer.N.attention.attention.{query,key,value}.{weight [C, C], bias [C]}
//       (the three weights are consecutive rows of one fused [3C, C] matrix, the biases one
//       [3C]; no biases when qkv_bias is false)
//   vit.encoder.layer.N.attention.output.dense.{weight [C, C], bias [C]}
//   vit.encoder.layer.N.layernorm_after.{weight, bias} [C]
//   vit.encoder.layer.N.intermediate.dense.{weight [F, C], bias [F]}
//   vit.encoder.layer.N.output.dense.{weight [C, F], bias [C]}
//   vit.layernorm.{weight, bias} [C], classifier.{weight [K, C], bias [K]}
//
// Forward, for a batch of N images x [N, Cin, H, W] (Np = (H/P)·(W/P) patches, row-major):
//   e  = patchify(x)·W_pᵀ + b_p                     [N·Np, C]  (= conv2d with stride P)
//   x₀ = drop([cls; e_n] + pos)                     [N·S, C], one sequence of S tokens per image
//   per layer: x ← x + drop(attn(LN_before(x)))     (bidirectional flash attention, q/k/v/o
//              x ← x + drop(W₂·gelu(W₁·LN_after(x) + b₁) + b₂)        biases, no RoPE)
//   y  = LN(x_L); pooled = y[CLS] ("cls") or mean of the patch rows of y ("mean")
//   logits = pooled·W_cᵀ + b_c                      [N, K]
// All N·S tokens go through every linear layer as one matrix; attention takes the packed batch
// with cu_seqlens = [0, S, 2S, ..., N·S]. PyTorch: tests/python/test_vit.py writes the same
// network in torch.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnkit/models/encoder_layer.hpp"
#include "attnkit/models/image_classifier.hpp"
#include "attnkit/models/vit_config.hpp"
#include "attnkit/nn/attention_block.hpp"

namespace attnkit {

class VitActivations;  // vit_activations.hpp: saved activations for one batch size

class VitModel final : public ConfiguredImageClassifier<VitConfig, vit_config_to_json> {
 public:
  // A model with all parameters zero (call init_random or load_weights).
  explicit VitModel(const VitConfig& config);
  ~VitModel() override;
  VitModel(VitModel&&) noexcept;
  VitModel& operator=(VitModel&&) noexcept;

  // "vit".
  std::string model_type() const override { return "vit"; }
  // [num_channels, image height, image width].
  ImageShape input_shape() const override;

  // config().initializer kTruncNormal: Hugging Face ViT's _init_weights: truncated normal
  // (±2σ, σ = initializer_range) for every matrix, the patch projection, cls token and position
  // embeddings; zero biases. kFanIn: PyTorch's nn.Linear / nn.Conv2d defaults for the matrices,
  // the patch projection and their biases (U(±1/√fan_in), fan_in = the weight's row length);
  // cls token and position embeddings as kTruncNormal. LayerNorm weights one, biases zero.
  // Deterministic in seed.
  void init_random(uint64_t seed) override;
  // Training turns on hidden and attention-probability dropout (if the config has them), keyed
  // by seed (use a new seed per step). Eval mode (the default) is deterministic.
  void set_training(bool training, uint64_t seed = 0) override;
  // logits [N, K] of x [N, Cin, H, W] (contiguous NCHW; shape must match input_shape());
  // valid until the next forward. Keeps the activations for backward().
  ConstView2 forward(ConstView4 x) override;
  // Adds (+=) into gradients() the gradient of a loss whose gradient with respect to the last
  // forward's logits [N, K] is d_logits [N, K]. No input gradient is formed.
  void backward(ConstView2 d_logits) override;

 private:
  void build_layout();
  void embed(ConstView4 x);
  void encoder_forward();
  void head_forward();
  void head_backward(ConstView2 d_logits);
  void encoder_backward();
  void embed_backward();
  AttentionBlockOptions block_options(int64_t layer) const;
  std::string layer_prefix(int64_t layer) const;  // "vit.encoder.layer.<layer>."
  float dropout_p() const;

  bool training_ = false;
  uint64_t seed_ = 0;
  std::unique_ptr<VitActivations> acts_;
  std::vector<EncoderLayerIds> layers_;
  TensorId cls_, position_;
  LayerIds patch_, final_norm_, classifier_;
};

// Number of trainable parameters of the model a config describes.
int64_t vit_parameter_count(const VitConfig& config);

}  // namespace attnkit
