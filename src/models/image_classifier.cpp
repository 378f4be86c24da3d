// ImageClassifier's save and the model_type factory
// (models/model_registry.hpp).
#include "attnkit/models/image_classifier.hpp"

#include "attnkit/core/error.hpp"
#include "attnkit/models/model_dir.hpp"
#include "attnkit/models/model_registry.hpp"

namespace attnkit {

void ImageClassifier::save(const std::string& dir) const { store_.save(dir, config_json()); }

std::unique_ptr<ImageClassifier> make_image_classifier(const std::string& config_json,
                                                       const std::string& source) {
  const ModelType& t = model_type_of_config(config_json, source);
  check(t.kind == ModelKind::kImage, source, ": model_type '", t.model_type,
        "' is not an image classifier");
  return t.make_image(config_json, source);
}

std::unique_ptr<ImageClassifier> load_image_classifier(const std::string& dir) {
  std::unique_ptr<ImageClassifier> model =
      make_image_classifier(read_model_config(dir, "load_image_classifier"), dir + "/config.json");
  model->load_weights(dir);
  return model;
}

}  // namespace attnkit
