#pragma once
// A small residual CNN for grey-scale image classification (Fashion-MNIST), with optional
// channel attention in every residual block: none, SE (Hu et al. 2018) or CBAM (Woo et al. 2018).
//
//   stem:     x → conv3×3(Cin→w0, pad 1) → BN → ReLU → maxpool 2                 [N, w0, S/2, S/2]
//   stage i (i = 1..len(widths)-1), input u with w_{i-1} channels:
//             h = ReLU(BN1(conv1 3×3(u)));  r = BN2(conv2 3×3(h));  r ← attention(r)
//             o = ReLU(r + shortcut(u))    shortcut = BN(conv 1×1(u)) if w_{i-1} ≠ w_i, else u
//             then maxpool 2, except after the last stage
//   head:     logits = fc(global_avg_pool(o))                                      [N, K]
// Convolutions have no bias (batch norm follows). The attention module sits on the residual
// branch before the addition, as in SE-ResNet and the CBAM paper. Names follow torchvision's
// ResNet style: "stem.conv.weight", "stages.1.bn2.running_mean", "stages.1.se.fc1.weight",
// "stages.1.cbam.spatial.weight", "fc.weight".
// PyTorch: tests/python/test_cnn.py writes the same network with torch.nn.functional.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/models/image_classifier.hpp"

namespace attnkit {

enum class ChannelAttention { kNone, kSe, kCbam };

// "none" | "se" | "cbam" → ChannelAttention; throws attnkit::Error naming `what` otherwise.
ChannelAttention parse_channel_attention(const std::string& name, const char* what = "attention");
// The name parse_channel_attention accepts for a value.
const char* channel_attention_name(ChannelAttention a);

struct CnnConfig {
  int64_t num_channels = 1;                 // Cin
  int64_t image_size = 28;                  // S (square images); must survive the poolings
  int64_t num_labels = 10;                  // K
  std::vector<int64_t> widths{32, 64, 128}; // stem width, then one residual stage per entry
  ChannelAttention attention = ChannelAttention::kNone;
  int64_t reduction = 8;                    // SE/CBAM MLP hidden units = max(1, w / reduction)
  int64_t spatial_kernel = 7;               // CBAM spatial-gate kernel (odd)
  double batch_norm_eps = 1e-5;
  double batch_norm_momentum = 0.1;
  std::vector<std::string> labels;          // class names (empty or num_labels entries)
};

// Parses config.json text ("model_type": "cnn"); throws attnkit::Error naming the key.
CnnConfig parse_cnn_config(const std::string& json_text, const std::string& source = "config.json");
// Serialises to config.json text.
std::string cnn_config_to_json(const CnnConfig& config);
// Checks ranges; throws attnkit::Error naming the key.
void validate(const CnnConfig& config);

class CnnActivations;  // cnn.cpp: saved activations and backward scratch for one batch size

class CnnModel final : public ConfiguredImageClassifier<CnnConfig, cnn_config_to_json> {
 public:
  explicit CnnModel(const CnnConfig& config);
  ~CnnModel() override;

  std::string model_type() const override { return "cnn"; }
  ImageShape input_shape() const override;

  // Kaiming-normal convolutions (fan_out, ReLU gain, as torchvision's ResNet), BN weight 1 and
  // bias 0, PyTorch's default uniform(±1/sqrt(fan_in)) for the linear layers and the CBAM
  // spatial convolution; running mean 0, running variance 1.
  void init_random(uint64_t seed) override;
  void set_training(bool training, uint64_t seed = 0) override { training_ = training; }
  ConstView2 forward(ConstView4 x) override;
  void backward(ConstView2 d_logits) override;

 private:
  struct StageIds {  // one residual stage's tensors (stages_[0]: the stem's conv1 and bn1)
    TensorId conv1, conv2, shortcut_conv;       // shortcut absent without a projection
    BatchNormIds bn1, bn2, shortcut_bn;
    LayerIds fc1, fc2, spatial;                 // SE / CBAM (absent without attention)
  };
  void build_layout();

  std::vector<StageIds> stages_;
  LayerIds fc_;
  bool training_ = false;
  std::unique_ptr<CnnActivations> acts_;
};

}  // namespace attnkit
