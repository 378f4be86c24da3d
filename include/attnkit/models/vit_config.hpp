#pragma once
// ViT configuration: Hugging Face `ViTConfig` keys (model_type "vit"), so a Hugging Face
// ViTForImageClassification directory's config.json loads as is and ours stays readable by HF
// tools, plus one attnkit key:
//
//   HF keys: hidden_size, num_hidden_layers, num_attention_heads, intermediate_size (required);
//            image_size (int or [H, W]), patch_size (int), num_channels, qkv_bias, hidden_act
//            ("gelu" exact, "gelu_new" / "gelu_pytorch_tanh" tanh approximation),
//            hidden_dropout_prob, attention_probs_dropout_prob, layer_norm_eps,
//            initializer_range, num_labels / id2label / label2id, architectures
//            (ViTForImageClassification), encoder_stride (unused).
//   attnkit: "pooling": "cls" (HF: the classifier reads the [CLS] token) or "mean" (mean of the
//            patch tokens after the final LayerNorm);
//            "initializer": "trunc_normal" (HF's _init_weights, the default: every matrix and the
//            patch projection ~ truncated normal with σ = initializer_range, zero biases) or
//            "fan_in" (PyTorch's nn.Linear / nn.Conv2d defaults: weight and bias ~ U(±1/√fan_in));
//            cls token and position embeddings are truncated normal in both. Only init_random
//            reads it.
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/nn/activation.hpp"  // GeluApproximation

namespace attnkit {

enum class VitPooling { kCls, kMean };
enum class VitInitializer { kTruncNormal, kFanIn };

struct VitConfig {
  int64_t hidden_size = 64;               // C
  int64_t num_hidden_layers = 2;          // L
  int64_t num_attention_heads = 4;        // H (head_dim D = C / H)
  int64_t intermediate_size = 128;        // F (MLP width)
  int64_t image_height = 28, image_width = 28;  // HF image_size
  int64_t patch_size = 4;                 // P: P×P patches at stride P
  int64_t num_channels = 1;               // Cin
  bool qkv_bias = true;
  GeluApproximation hidden_act = GeluApproximation::kNone;
  double hidden_dropout_prob = 0.0;
  double attention_probs_dropout_prob = 0.0;
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02;        // std of the (truncated) normal init
  int64_t num_labels = 10;                // K
  std::vector<std::string> labels;        // id2label names (empty or num_labels entries)
  VitPooling pooling = VitPooling::kCls;
  VitInitializer initializer = VitInitializer::kTruncNormal;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t grid_h() const { return image_height / patch_size; }
  int64_t grid_w() const { return image_width / patch_size; }
  int64_t num_patches() const { return grid_h() * grid_w(); }       // Np
  int64_t seq_len() const { return num_patches() + 1; }             // S = Np + 1 ([CLS] first)
  int64_t patch_dim() const { return num_channels * patch_size * patch_size; }  // Cin·P·P
};

// Parses config.json text; throws attnkit::Error naming the key for missing/invalid values.
// Rules of models/config_reader.hpp (unknown keys refused, sizes bounded, labels); `source`
// names the file in errors.
VitConfig parse_vit_config(const std::string& json_text, const std::string& source = "config.json");
// Serialises to config.json text (HF keys, model_type "vit", architectures
// ViTForImageClassification, plus "pooling" and "initializer").
std::string vit_config_to_json(const VitConfig& config);
// Checks ranges and divisibility (image_size % patch_size, hidden_size % num_attention_heads);
// throws attnkit::Error naming the key.
void validate(const VitConfig& config);

}  // namespace attnkit
