// ViT config.json ↔ VitConfig (Hugging Face ViTConfig keys + attnkit's "pooling", "initializer").
#include "attnkit/models/vit_config.hpp"

#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

using nlohmann::json;

int64_t get_int(const json& j, const char* key, int64_t fallback, bool required) {
  if (!j.contains(key) || j[key].is_null()) {
    check(!required, "vit config: missing required key '", key, "'");
    return fallback;
  }
  check(j[key].is_number_integer(), "vit config: '", key, "' must be an integer");
  return j[key].get<int64_t>();
}

double get_number(const json& j, const char* key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  check(j[key].is_number(), "vit config: '", key, "' must be a number");
  return j[key].get<double>();
}

// HF accepts an int (square) or an [H, W] pair for image_size.
void get_image_size(const json& j, VitConfig& c) {
  check(j.contains("image_size"), "vit config: missing required key 'image_size'");
  const json& s = j["image_size"];
  if (s.is_number_integer()) {
    c.image_height = c.image_width = s.get<int64_t>();
    return;
  }
  check(s.is_array() && s.size() == 2 && s[0].is_number_integer() && s[1].is_number_integer(),
        "vit config: 'image_size' must be an integer or a list [height, width]");
  c.image_height = s[0].get<int64_t>();
  c.image_width = s[1].get<int64_t>();
}

GeluApproximation parse_act(const json& j) {
  if (!j.contains("hidden_act")) return GeluApproximation::kNone;
  check(j["hidden_act"].is_string(), "vit config: 'hidden_act' must be a string");
  const std::string act = j["hidden_act"].get<std::string>();
  if (act == "gelu") return GeluApproximation::kNone;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return GeluApproximation::kTanh;
  fail("vit config: hidden_act must be \"gelu\", \"gelu_new\" or \"gelu_pytorch_tanh\", got \"", act,
       "\"");
}

void parse_labels(const json& j, VitConfig& c) {
  if (!j.contains("id2label")) return;
  check(j["id2label"].is_object(), "vit config: 'id2label' must be an object");
  const int64_t n = int64_t(j["id2label"].size());
  c.labels.assign(size_t(n), "");
  for (const auto& [k, v] : j["id2label"].items()) {
    int64_t id = -1;
    try {
      id = std::stoll(k);
    } catch (const std::exception&) {
    }
    check(id >= 0 && id < n && v.is_string(), "vit config: id2label must map \"0\"..\"", n - 1,
          "\" to strings; bad entry \"", k, "\"");
    c.labels[size_t(id)] = v.get<std::string>();
  }
  c.num_labels = n;
}

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

VitConfig parse_vit_config(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("vit config: not valid JSON (", e.what(), ")");
  }
  check(j.is_object(), "vit config: top level must be a JSON object");
  if (j.contains("model_type"))
    check(j["model_type"] == "vit", "vit config: 'model_type' must be \"vit\"");
  if (j.contains("architectures"))
    check(j["architectures"].is_array() && j["architectures"].size() == 1 &&
              j["architectures"][0] == "ViTForImageClassification",
          "vit config: 'architectures' must be [\"ViTForImageClassification\"]");
  VitConfig c;
  c.hidden_size = get_int(j, "hidden_size", 0, true);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", 0, true);
  c.num_attention_heads = get_int(j, "num_attention_heads", 0, true);
  c.intermediate_size = get_int(j, "intermediate_size", 0, true);
  get_image_size(j, c);
  c.patch_size = get_int(j, "patch_size", 0, true);
  c.num_channels = get_int(j, "num_channels", 3, false);
  if (j.contains("qkv_bias")) {
    check(j["qkv_bias"].is_boolean(), "vit config: 'qkv_bias' must be true or false");
    c.qkv_bias = j["qkv_bias"].get<bool>();
  }
  c.hidden_act = parse_act(j);
  c.hidden_dropout_prob = get_number(j, "hidden_dropout_prob", 0.0);
  c.attention_probs_dropout_prob = get_number(j, "attention_probs_dropout_prob", 0.0);
  c.layer_norm_eps = get_number(j, "layer_norm_eps", 1e-12);
  c.initializer_range = get_number(j, "initializer_range", 0.02);
  c.num_labels = 2;  // HF's PretrainedConfig default
  parse_labels(j, c);
  c.num_labels = get_int(j, "num_labels", c.num_labels, false);
  if (int64_t(c.labels.size()) != c.num_labels) c.labels.clear();
  if (j.contains("pooling")) {
    const json& p = j["pooling"];
    check(p == "cls" || p == "mean", "vit config: 'pooling' must be \"cls\" or \"mean\"");
    c.pooling = p == "cls" ? VitPooling::kCls : VitPooling::kMean;
  }
  if (j.contains("initializer")) {
    const json& i = j["initializer"];
    check(i == "trunc_normal" || i == "fan_in",
          "vit config: 'initializer' must be \"trunc_normal\" or \"fan_in\"");
    c.initializer = i == "fan_in" ? VitInitializer::kFanIn : VitInitializer::kTruncNormal;
  }
  validate(c);
  return c;
}

std::string vit_config_to_json(const VitConfig& c) {
  json image_size = c.image_height == c.image_width
                        ? json(c.image_height)
                        : json::array({c.image_height, c.image_width});
  json j = {{"architectures", {"ViTForImageClassification"}},
            {"model_type", "vit"},
            {"hidden_size", c.hidden_size},
            {"num_hidden_layers", c.num_hidden_layers},
            {"num_attention_heads", c.num_attention_heads},
            {"intermediate_size", c.intermediate_size},
            {"hidden_act", c.hidden_act == GeluApproximation::kNone ? "gelu" : "gelu_new"},
            {"hidden_dropout_prob", c.hidden_dropout_prob},
            {"attention_probs_dropout_prob", c.attention_probs_dropout_prob},
            {"layer_norm_eps", c.layer_norm_eps},
            {"initializer_range", c.initializer_range},
            {"image_size", image_size},
            {"patch_size", c.patch_size},
            {"num_channels", c.num_channels},
            {"qkv_bias", c.qkv_bias},
            {"encoder_stride", c.patch_size},
            {"torch_dtype", "float32"},
            {"num_labels", c.num_labels},
            {"pooling", c.pooling == VitPooling::kCls ? "cls" : "mean"},
            {"initializer", c.initializer == VitInitializer::kFanIn ? "fan_in" : "trunc_normal"}};
  if (!c.labels.empty()) {
    json id2label = json::object(), label2id = json::object();
    for (size_t i = 0; i < c.labels.size(); ++i) {
      id2label[std::to_string(i)] = c.labels[i];
      label2id[c.labels[i]] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
  }
  return j.dump(2) + "\n";
}

}  // namespace attnkit
