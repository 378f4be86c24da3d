// DeformableConfig: config.json parsing (strict: unknown keys are errors, so a misspelt key is
// not silently replaced by its default), serialisation and validation.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/models/deformable_classifier.hpp"

namespace attnkit {
namespace {

using nlohmann::json;

constexpr const char* kKeys[] = {"model_type", "num_channels", "image_size", "num_labels",
                                 "widths", "levels", "d_model", "heads", "points", "layers",
                                 "ffn_dim", "layer_norm_eps", "batch_norm_eps",
                                 "batch_norm_momentum", "id2label"};

int64_t get_int(const json& j, const char* key, int64_t fallback) {
  if (!j.contains(key)) return fallback;
  check(j[key].is_number_integer(), "deformable config: '", key, "' must be an integer, got ",
        j[key].dump());
  return j[key].get<int64_t>();
}

double get_number(const json& j, const char* key, double fallback) {
  if (!j.contains(key)) return fallback;
  check(j[key].is_number(), "deformable config: '", key, "' must be a number, got ", j[key].dump());
  return j[key].get<double>();
}

}  // namespace

std::vector<int64_t> deformable_map_sizes(const DeformableConfig& c) {
  std::vector<int64_t> s{c.image_size};
  for (size_t i = 1; i < c.widths.size(); ++i) s.push_back((s.back() + 1) / 2);  // 3×3, stride 2, pad 1
  return s;
}

DeformableConfig parse_deformable_config(const std::string& json_text) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("deformable config: invalid JSON: ", e.what());
  }
  check(j.is_object(), "deformable config: expected a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    check(std::find_if(std::begin(kKeys), std::end(kKeys),
                       [&](const char* k) { return it.key() == k; }) != std::end(kKeys),
          "deformable config: unknown key '", it.key(), "'");
  check(j.contains("model_type") && j["model_type"] == "deformable",
        "deformable config: 'model_type' must be \"deformable\"");
  DeformableConfig c;
  c.num_channels = get_int(j, "num_channels", c.num_channels);
  c.image_size = get_int(j, "image_size", c.image_size);
  c.num_labels = get_int(j, "num_labels", c.num_labels);
  if (j.contains("widths")) {
    const json& w = j["widths"];
    check(w.is_array(), "deformable config: 'widths' must be an array of integers");
    c.widths.clear();
    for (const json& v : w) {
      check(v.is_number_integer(), "deformable config: 'widths' must be an array of integers");
      c.widths.push_back(v.get<int64_t>());
    }
  }
  if (j.contains("levels"))
    check(get_int(j, "levels", 0) == c.levels(), "deformable config: 'levels' (",
          j["levels"].dump(), ") must equal len(widths) - 1 = ", c.levels(),
          " (one level per stride-2 backbone stage)");
  c.d_model = get_int(j, "d_model", c.d_model);
  c.heads = get_int(j, "heads", c.heads);
  c.points = get_int(j, "points", c.points);
  c.layers = get_int(j, "layers", c.layers);
  c.ffn_dim = get_int(j, "ffn_dim", c.ffn_dim);
  c.layer_norm_eps = get_number(j, "layer_norm_eps", c.layer_norm_eps);
  c.batch_norm_eps = get_number(j, "batch_norm_eps", c.batch_norm_eps);
  c.batch_norm_momentum = get_number(j, "batch_norm_momentum", c.batch_norm_momentum);
  if (j.contains("id2label")) {
    const json& m = j["id2label"];
    check(m.is_object(), "deformable config: 'id2label' must be an object");
    c.labels.assign(size_t(std::clamp<int64_t>(c.num_labels, 0, 100000)), "");
    for (auto it = m.begin(); it != m.end(); ++it) {
      int64_t id = -1;
      try {
        id = std::stoll(it.key());
      } catch (const std::exception&) {
      }
      check(id >= 0 && id < c.num_labels && it.value().is_string(),
            "deformable config: 'id2label' has an invalid entry '", it.key(), "'");
      c.labels[size_t(id)] = it.value().get<std::string>();
    }
  }
  validate(c);
  return c;
}

std::string deformable_config_to_json(const DeformableConfig& c) {
  nlohmann::ordered_json j;
  j["model_type"] = "deformable";
  j["num_channels"] = c.num_channels;
  j["image_size"] = c.image_size;
  j["num_labels"] = c.num_labels;
  j["widths"] = c.widths;
  j["levels"] = c.levels();
  j["d_model"] = c.d_model;
  j["heads"] = c.heads;
  j["points"] = c.points;
  j["layers"] = c.layers;
  j["ffn_dim"] = c.ffn_dim;
  j["layer_norm_eps"] = c.layer_norm_eps;
  j["batch_norm_eps"] = c.batch_norm_eps;
  j["batch_norm_momentum"] = c.batch_norm_momentum;
  if (!c.labels.empty()) {
    nlohmann::ordered_json m;
    for (size_t i = 0; i < c.labels.size(); ++i) m[std::to_string(i)] = c.labels[i];
    j["id2label"] = m;
  }
  return j.dump(2) + "\n";
}

void validate(const DeformableConfig& c) {
  auto in = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  check(in(c.num_channels, 1, 64), "deformable config: 'num_channels' must be in [1, 64], got ",
        c.num_channels);
  check(in(c.image_size, 1, 4096), "deformable config: 'image_size' must be in [1, 4096], got ",
        c.image_size);
  check(in(c.num_labels, 2, 100000), "deformable config: 'num_labels' must be in [2, 100000], got ",
        c.num_labels);
  check(c.widths.size() >= 2 && c.widths.size() <= 9,
        "deformable config: 'widths' needs 2 to 9 entries (the stem, then one per level), got ",
        c.widths.size());
  for (int64_t w : c.widths)
    check(in(w, 1, 4096), "deformable config: every 'widths' entry must be in [1, 4096], got ", w);
  check(in(c.heads, 1, 256), "deformable config: 'heads' must be in [1, 256], got ", c.heads);
  check(in(c.d_model, 4, 8192) && c.d_model % 4 == 0 && c.d_model % c.heads == 0,
        "deformable config: 'd_model' (", c.d_model,
        ") must be a multiple of 4 (sine embedding) and of 'heads' (", c.heads, ")");
  check(in(c.points, 1, 64), "deformable config: 'points' must be in [1, 64], got ", c.points);
  check(in(c.layers, 1, 64), "deformable config: 'layers' must be in [1, 64], got ", c.layers);
  check(in(c.ffn_dim, 1, 65536), "deformable config: 'ffn_dim' must be in [1, 65536], got ",
        c.ffn_dim);
  check(c.layer_norm_eps > 0, "deformable config: 'layer_norm_eps' must be > 0");
  check(c.batch_norm_eps >= 0, "deformable config: 'batch_norm_eps' must be >= 0");
  check(c.batch_norm_momentum >= 0 && c.batch_norm_momentum <= 1,
        "deformable config: 'batch_norm_momentum' must be in [0, 1]");
  check(c.labels.empty() || int64_t(c.labels.size()) == c.num_labels,
        "deformable config: 'id2label' must name every label");
}

}  // namespace attnkit
