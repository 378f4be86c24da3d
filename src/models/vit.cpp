// ViT model: parameter layout with Hugging Face names, initialisation, accessors, the factory.
// The forward and backward passes are in vit_forward.cpp.
#include "attnkit/models/vit.hpp"

#include <cmath>
#include <random>

#include "attnkit/core/error.hpp"
#include "vit_activations.hpp"

namespace attnkit {
namespace {
// Hugging Face ViTLayer: pre-LN.
constexpr EncoderLayerNames kLayerNames = {"attention.attention", "layernorm_before",
                                           "layernorm_after", true};
}  // namespace

VitModel::VitModel(const VitConfig& config) : ConfiguredImageClassifier("VitModel", config) {
  validate(config_);
  build_layout();
}
VitModel::~VitModel() = default;
VitModel::VitModel(VitModel&&) noexcept = default;
VitModel& VitModel::operator=(VitModel&&) noexcept = default;

ImageShape VitModel::input_shape() const {
  return {config_.num_channels, config_.image_height, config_.image_width};
}


std::string VitModel::layer_prefix(int64_t l) const {
  return "vit.encoder.layer." + std::to_string(l) + ".";
}

void VitModel::build_layout() {
  const VitConfig& c = config_;
  const int64_t C = c.hidden_size, F = c.intermediate_size, P = c.patch_size;
  ParameterStore& s = store_;
  s.add("vit.embeddings.cls_token", {1, 1, C});
  s.add("vit.embeddings.position_embeddings", {1, c.seq_len(), C});
  s.add("vit.embeddings.patch_embeddings.projection.weight", {C, c.num_channels, P, P});
  s.add("vit.embeddings.patch_embeddings.projection.bias", {C});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    add_encoder_layer(s, layer_prefix(l), kLayerNames, C, F, c.qkv_bias);
  s.add_norm("vit.layernorm", C);
  s.add_linear("classifier", c.num_labels, C);
  s.allocate();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    layers_.push_back(encoder_layer_ids(s, layer_prefix(l), kLayerNames, C));
  cls_ = s.id("vit.embeddings.cls_token");
  position_ = s.id("vit.embeddings.position_embeddings");
  patch_ = s.layer("vit.embeddings.patch_embeddings.projection");
  final_norm_ = s.layer("vit.layernorm");
  classifier_ = s.layer("classifier");
}

AttentionBlockOptions VitModel::block_options(int64_t l) const {
  return encoder_block_options(config_.num_attention_heads, config_.head_dim(), config_.qkv_bias,
                               training_ ? float(config_.attention_probs_dropout_prob) : 0.0f,
                               seed_, l);
}

float VitModel::dropout_p() const {
  return training_ ? float(config_.hidden_dropout_prob) : 0.0f;
}

void VitModel::set_training(bool training, uint64_t seed) {
  training_ = training;
  seed_ = seed;
}

void VitModel::init_random(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const float sigma = float(config_.initializer_range);
  std::normal_distribution<float> normal(0.0f, sigma);
  auto trunc_normal = [&] {  // torch.nn.init.trunc_normal_ at ±2σ, by rejection
    for (;;) {
      const float v = normal(rng);
      if (std::abs(v) <= 2 * sigma) return v;
    }
  };
  const bool fan_in = config_.initializer == VitInitializer::kFanIn;
  for (const auto& p : store_.info()) {
    float* x = store_.parameters().data() + p.offset;
    const bool norm = p.name.find("layernorm") != std::string::npos;
    const bool weight = p.name.ends_with(".weight");
    const bool embedding = p.name.ends_with("cls_token") || p.name.ends_with("position_embeddings");
    if (fan_in && !norm && !embedding) {
      // nn.Linear / nn.Conv2d reset_parameters: kaiming_uniform(a = √5) for the weight and
      // U(±1/√fan_in) for the bias, i.e. both U(±1/√fan_in); fan_in = the weight's row length
      // (Cin·P·P for the patch projection).
      const std::string base = p.name.substr(0, p.name.rfind('.'));
      const ParameterInfo& wi = info(base + ".weight");
      const float bound = 1.0f / std::sqrt(float(wi.numel / wi.shape[0]));
      std::uniform_real_distribution<float> uniform(-bound, bound);
      for (int64_t i = 0; i < p.numel; ++i) x[i] = uniform(rng);
      continue;
    }
    const bool random = (weight && !norm) || embedding;
    for (int64_t i = 0; i < p.numel; ++i) x[i] = random ? trunc_normal() : norm && weight ? 1.0f : 0.0f;
  }
}

int64_t vit_parameter_count(const VitConfig& config) {
  const VitModel m(config);  // the layout is the definition
  return m.parameter_count();
}

}  // namespace attnkit
