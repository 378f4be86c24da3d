// The model_type → kind/loader table and the look-ups on it.
#include "attnkit/models/model_registry.hpp"

#include <nlohmann/json.hpp>
#include <string_view>

#include "attnkit/core/error.hpp"
#include "attnkit/models/cnn.hpp"
#include "attnkit/models/deformable_classifier.hpp"
#include "attnkit/models/model_dir.hpp"
#include "attnkit/models/vit.hpp"

namespace attnkit {
namespace {

// An image model with zero weights from config.json text (`parse` names the invalid key).
template <class Model, auto parse>
std::unique_ptr<ImageClassifier> make(const std::string& config_json, const std::string& source) {
  return std::make_unique<Model>(parse(config_json, source));
}

constexpr ModelType kModelTypes[] = {
    {"llama", ModelKind::kGpt, nullptr},
    {"bert", ModelKind::kBert, nullptr},
    {"vit", ModelKind::kImage, &make<VitModel, &parse_vit_config>},
    {"cnn", ModelKind::kImage, &make<CnnModel, &parse_cnn_config>},
    {"deformable", ModelKind::kImage, &make<DeformableClassifier, &parse_deformable_config>},
};

std::string registered_names() {
  std::string s;
  for (const ModelType& t : kModelTypes) s += std::string(s.empty() ? "" : ", ") + t.model_type;
  return s;
}

// "a" or "an" before `word` (by its first letter: "an image", "a GPT", "a bert").
const char* article(const char* word) {
  return std::string_view("aeiouAEIOU").find(word[0]) != std::string_view::npos ? "an" : "a";
}

}  // namespace

std::span<const ModelType> model_types() { return kModelTypes; }

const char* model_kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::kGpt: return "GPT";
    case ModelKind::kBert: return "BERT";
    default: return "image";
  }
}

const ModelType& model_type_of_config(const std::string& config_json, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(config_json);
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": invalid JSON (", e.what(), ")");
  }
  check(j.is_object() && j.contains("model_type") && j["model_type"].is_string(), source,
        ": missing string key 'model_type' (one of ", registered_names(), ")");
  const std::string type = j["model_type"].get<std::string>();
  for (const ModelType& t : kModelTypes)
    if (type == t.model_type) return t;
  fail(source, ": unknown model_type '", type, "' (attnkit knows ", registered_names(), ")");
}

const ModelType& model_type_of_dir(const std::string& dir) {
  return model_type_of_config(read_model_config(dir, "model directory"), dir + "/config.json");
}

const ModelType& require_model_kind(const std::string& dir, ModelKind kind, const char* command,
                                    const std::string& flag) {
  const ModelType& t = model_type_of_dir(dir);
  check(t.kind == kind, "`", command, "` needs ", article(model_kind_name(kind)), " ",
        model_kind_name(kind), " model; ", flag.empty() ? "" : flag + " ", dir, " holds ", article(t.model_type), " ", t.model_type,
        " model");
  return t;
}

}  // namespace attnkit
