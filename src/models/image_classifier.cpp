// ImageClassifier's shared parts (zero_grad, save, load) and the model_type factory.
#include "attnkit/models/image_classifier.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/models/cnn.hpp"
#include "attnkit/models/deformable_classifier.hpp"
#include "attnkit/models/model_dir.hpp"
#include "attnkit/models/vit.hpp"

namespace attnkit {

const std::vector<ParameterInfo>& ImageClassifier::buffer_info() const {
  static const std::vector<ParameterInfo> none;
  return none;
}

void ImageClassifier::zero_grad() {
  const std::span<float> g = gradients();
  std::fill(g.begin(), g.end(), 0.0f);
}

void ImageClassifier::save(const std::string& dir) const {
  const TensorGroup groups[] = {{&parameter_info(), parameters()}, {&buffer_info(), buffers()}};
  save_model_dir(dir, config_json(), groups, "ImageClassifier.save");
}

void ImageClassifier::load_weights(const std::string& dir) {
  load_model_tensors(dir, parameter_info(), parameters(), "ImageClassifier.load");
  load_model_tensors(dir, buffer_info(), buffers(), "ImageClassifier.load");
}

std::unique_ptr<ImageClassifier> make_image_classifier(const std::string& config_json) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(config_json);
  } catch (const nlohmann::json::exception& e) {
    fail("image model config: invalid JSON: ", e.what());
  }
  check(j.is_object() && j.contains("model_type") && j["model_type"].is_string(),
        "image model config: missing string key 'model_type'");
  const std::string type = j["model_type"].get<std::string>();
  // One line per architecture (keep the list in the error message in step).
  if (type == "cnn") return make_cnn_classifier(config_json);
  if (type == "deformable") return make_deformable_classifier(config_json);
  if (type == "vit") return make_vit_classifier(config_json);
  fail("image model config: unknown model_type '", type, "' (expected cnn, vit or deformable)");
}

std::unique_ptr<ImageClassifier> load_image_classifier(const std::string& dir) {
  std::unique_ptr<ImageClassifier> model =
      make_image_classifier(read_model_config(dir, "load_image_classifier"));
  model->load_weights(dir);
  return model;
}

}  // namespace attnkit
