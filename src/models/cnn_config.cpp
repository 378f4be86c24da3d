// CnnConfig: config.json parsing, serialisation and validation.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/models/cnn.hpp"

namespace attnkit {

ChannelAttention parse_channel_attention(const std::string& name, const char* what) {
  if (name == "none") return ChannelAttention::kNone;
  if (name == "se") return ChannelAttention::kSe;
  if (name == "cbam") return ChannelAttention::kCbam;
  fail(what, ": expected none, se or cbam, got '", name, "'");
}

const char* channel_attention_name(ChannelAttention a) {
  switch (a) {
    case ChannelAttention::kSe: return "se";
    case ChannelAttention::kCbam: return "cbam";
    default: return "none";
  }
}

namespace {
template <class T>
T get_or(const nlohmann::json& j, const char* key, T fallback) {
  if (!j.contains(key)) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("cnn config: key '", key, "' has the wrong type");
  }
}
}  // namespace

CnnConfig parse_cnn_config(const std::string& json_text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail("cnn config: invalid JSON: ", e.what());
  }
  check(j.is_object(), "cnn config: expected a JSON object");
  check(get_or<std::string>(j, "model_type", "") == "cnn", "cnn config: 'model_type' must be \"cnn\"");
  CnnConfig c;
  c.num_channels = get_or<int64_t>(j, "num_channels", c.num_channels);
  c.image_size = get_or<int64_t>(j, "image_size", c.image_size);
  c.num_labels = get_or<int64_t>(j, "num_labels", c.num_labels);
  c.widths = get_or<std::vector<int64_t>>(j, "widths", c.widths);
  c.attention = parse_channel_attention(get_or<std::string>(j, "attention", "none"),
                                        "cnn config: 'attention'");
  c.reduction = get_or<int64_t>(j, "reduction", c.reduction);
  c.spatial_kernel = get_or<int64_t>(j, "spatial_kernel", c.spatial_kernel);
  c.batch_norm_eps = get_or<double>(j, "batch_norm_eps", c.batch_norm_eps);
  c.batch_norm_momentum = get_or<double>(j, "batch_norm_momentum", c.batch_norm_momentum);
  if (j.contains("id2label")) {
    const nlohmann::json& m = j["id2label"];
    check(m.is_object(), "cnn config: 'id2label' must be an object");
    c.labels.assign(size_t(std::max<int64_t>(c.num_labels, 0)), "");
    for (auto it = m.begin(); it != m.end(); ++it) {
      int64_t id = -1;
      try {
        id = std::stoll(it.key());
      } catch (const std::exception&) {
      }
      check(id >= 0 && id < c.num_labels && it.value().is_string(),
            "cnn config: 'id2label' has an invalid entry '", it.key(), "'");
      c.labels[size_t(id)] = it.value().get<std::string>();
    }
  }
  validate(c);
  return c;
}

std::string cnn_config_to_json(const CnnConfig& c) {
  nlohmann::ordered_json j;
  j["model_type"] = "cnn";
  j["num_channels"] = c.num_channels;
  j["image_size"] = c.image_size;
  j["num_labels"] = c.num_labels;
  j["widths"] = c.widths;
  j["attention"] = channel_attention_name(c.attention);
  j["reduction"] = c.reduction;
  j["spatial_kernel"] = c.spatial_kernel;
  j["batch_norm_eps"] = c.batch_norm_eps;
  j["batch_norm_momentum"] = c.batch_norm_momentum;
  if (!c.labels.empty()) {
    nlohmann::ordered_json m;
    for (size_t i = 0; i < c.labels.size(); ++i) m[std::to_string(i)] = c.labels[i];
    j["id2label"] = m;
  }
  return j.dump(2) + "\n";
}

void validate(const CnnConfig& c) {
  check(c.num_channels >= 1 && c.num_channels <= 64, "cnn config: 'num_channels' must be in [1, 64], got ",
        c.num_channels);
  check(c.num_labels >= 2 && c.num_labels <= 100000, "cnn config: 'num_labels' must be in [2, 100000], got ",
        c.num_labels);
  check(!c.widths.empty() && c.widths.size() <= 8, "cnn config: 'widths' needs 1 to 8 entries");
  for (int64_t w : c.widths)
    check(w >= 1 && w <= 4096, "cnn config: every 'widths' entry must be in [1, 4096], got ", w);
  check(c.image_size >= 1 && c.image_size <= 4096, "cnn config: 'image_size' must be in [1, 4096]");
  // The stem pools once and every stage but the last pools once more.
  const int64_t pools = std::max<int64_t>(1, int64_t(c.widths.size()) - 1);
  int64_t s = c.image_size;
  for (int64_t i = 0; i < pools; ++i) {
    s /= 2;
    check(s >= 1, "cnn config: 'image_size' ", c.image_size, " is too small for ", pools,
          " poolings by 2");
  }
  check(c.reduction >= 1, "cnn config: 'reduction' must be >= 1, got ", c.reduction);
  check(c.spatial_kernel >= 1 && c.spatial_kernel % 2 == 1 && c.spatial_kernel <= 15,
        "cnn config: 'spatial_kernel' must be odd and in [1, 15], got ", c.spatial_kernel);
  check(c.batch_norm_eps >= 0, "cnn config: 'batch_norm_eps' must be >= 0");
  check(c.batch_norm_momentum >= 0 && c.batch_norm_momentum <= 1,
        "cnn config: 'batch_norm_momentum' must be in [0, 1]");
  check(c.labels.empty() || int64_t(c.labels.size()) == c.num_labels,
        "cnn config: 'id2label' must name every label");
}

}  // namespace attnkit
