// ViT config.json ↔ VitConfig (Hugging Face ViTConfig keys + attnkit's "pooling", "initializer").
#include "attnkit/models/vit_config.hpp"

#include "attnkit/core/error.hpp"
#include "attnkit/models/config_reader.hpp"
#include "encoder_config.hpp"

namespace attnkit {
namespace {

constexpr std::pair<const char*, VitPooling> kPoolings[] = {{"cls", VitPooling::kCls},
                                                            {"mean", VitPooling::kMean}};
constexpr std::pair<const char*, VitInitializer> kInitializers[] = {
    {"trunc_normal", VitInitializer::kTruncNormal}, {"fan_in", VitInitializer::kFanIn}};

}  // namespace

void validate(const VitConfig& c) {
  check(c.hidden_size >= 1, "vit config: hidden_size must be >= 1, got ", c.hidden_size);
  check(c.num_hidden_layers >= 1, "vit config: num_hidden_layers must be >= 1, got ",
        c.num_hidden_layers);
  check(c.num_attention_heads >= 1 && c.hidden_size % c.num_attention_heads == 0,
        "vit config: num_attention_heads (", c.num_attention_heads, ") must divide hidden_size (",
        c.hidden_size, ")");
  check(c.intermediate_size >= 1, "vit config: intermediate_size must be >= 1, got ",
        c.intermediate_size);
  check(c.patch_size >= 1, "vit config: patch_size must be >= 1, got ", c.patch_size);
  check(c.image_height >= 1 && c.image_width >= 1, "vit config: image_size must be >= 1, got [",
        c.image_height, ", ", c.image_width, "]");
  check(c.image_height % c.patch_size == 0 && c.image_width % c.patch_size == 0,
        "vit config: image_size [", c.image_height, ", ", c.image_width,
        "] must be a multiple of patch_size (", c.patch_size, ")");
  check(c.num_channels >= 1, "vit config: num_channels must be >= 1, got ", c.num_channels);
  check(c.hidden_dropout_prob >= 0 && c.hidden_dropout_prob < 1,
        "vit config: hidden_dropout_prob must be in [0, 1), got ", c.hidden_dropout_prob);
  check(c.attention_probs_dropout_prob >= 0 && c.attention_probs_dropout_prob < 1,
        "vit config: attention_probs_dropout_prob must be in [0, 1), got ",
        c.attention_probs_dropout_prob);
  check(c.layer_norm_eps > 0, "vit config: layer_norm_eps must be > 0, got ", c.layer_norm_eps);
  check(c.initializer_range > 0, "vit config: initializer_range must be > 0, got ",
        c.initializer_range);
  check(c.num_labels >= 1, "vit config: num_labels must be >= 1, got ", c.num_labels);
  check(c.labels.empty() || int64_t(c.labels.size()) == c.num_labels,
        "vit config: id2label must have num_labels = ", c.num_labels, " entries, got ",
        c.labels.size());
}

VitConfig parse_vit_config(const std::string& text, const std::string& source) {
  ConfigReader r(text, source);
  r.model_type({"vit"}, false);
  const std::vector<std::string> archs = r.strings("architectures");
  if (r.has("architectures") && (archs.size() != 1 || archs[0] != "ViTForImageClassification"))
    r.fail_key("architectures", "must be [\"ViTForImageClassification\"]");
  VitConfig c;
  encoder_config::read(r, c, 0.0);
  if (!r.has("image_size")) r.fail_key("image_size", "is required");
  const std::vector<int64_t> image = r.integers("image_size", {}, true);  // HF: int or [H, W]
  if (image.size() != 1 && image.size() != 2)
    r.fail_key("image_size", "must be an integer or a list [height, width]");
  for (int64_t side : image)
    if (side < 1 || side > kMaxConfigImageSide)
      r.fail_key("image_size", "must be in [1, ", kMaxConfigImageSide, "], got ", side);
  c.image_height = image[0];
  c.image_width = image.back();
  c.patch_size = r.size("patch_size", kMaxConfigImageSide);
  c.num_channels = r.size("num_channels", 3, kMaxConfigWidth);
  r.integer("encoder_stride", c.patch_size);  // HF's masked-image-modeling decoder only
  c.qkv_bias = r.boolean("qkv_bias", true);
  c.initializer_range = r.number("initializer_range", 0.02);
  const ConfigLabels labels = r.labels(2);  // 2: HF's PretrainedConfig default
  c.num_labels = labels.num_labels;
  c.labels = labels.names;
  c.pooling = r.choice("pooling", VitPooling::kCls, kPoolings);
  c.initializer = r.choice("initializer", VitInitializer::kTruncNormal, kInitializers);
  r.finish();
  r.validate_with([&] { validate(c); });
  return c;
}

std::string vit_config_to_json(const VitConfig& c) {
  ConfigWriter w;
  w.architecture("ViTForImageClassification", "vit");
  encoder_config::write(w, c)
      .set("layer_norm_eps", c.layer_norm_eps)
      .set("initializer_range", c.initializer_range);
  if (c.image_height == c.image_width) {
    w.set("image_size", c.image_height);
  } else {
    const int64_t hw[] = {c.image_height, c.image_width};
    w.set("image_size", std::span<const int64_t>(hw));
  }
  w.set("patch_size", c.patch_size)
      .set("num_channels", c.num_channels)
      .set("qkv_bias", c.qkv_bias)
      .set("encoder_stride", c.patch_size)
      .set("torch_dtype", "float32")
      .labels(c.num_labels, c.labels)
      .set("pooling", c.pooling == VitPooling::kCls ? "cls" : "mean")
      .set("initializer", c.initializer == VitInitializer::kFanIn ? "fan_in" : "trunc_normal");
  return w.text();
}

}  // namespace attnkit
