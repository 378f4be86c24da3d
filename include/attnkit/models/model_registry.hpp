#pragma once
// The model types attnkit knows, keyed by config.json's "model_type" (the JSON is parsed, never
// string-matched): which kind of model each is (GPT text model, BERT text model, image
// classifier) and, for image classifiers, how to build one. The CLI commands and the Python
// loaders pick their loader here, and refuse a directory of the wrong kind with a message naming
// both. Adding a model type is one row of model_registry.cpp (docs/architecture-models.md).
#include <memory>
#include <span>
#include <string>

#include "attnkit/models/image_classifier.hpp"

namespace attnkit {

enum class ModelKind { kGpt, kBert, kImage };

// An image classifier with zero weights from config.json text; `source` names the file in errors.
using ImageClassifierFactory = std::unique_ptr<ImageClassifier> (*)(const std::string& config_json,
                                                                   const std::string& source);

struct ModelType {
  const char* model_type;              // config.json's "model_type"
  ModelKind kind;
  ImageClassifierFactory make_image;   // kImage: builds the model; nullptr for text models
};

// Every registered model type, in a fixed order.
std::span<const ModelType> model_types();
// "GPT", "BERT" or "image": the word error messages use for a kind.
const char* model_kind_name(ModelKind kind);
// The entry for config.json text's "model_type"; throws attnkit::Error naming `source` and the
// registered types when the key is missing or unknown.
const ModelType& model_type_of_config(const std::string& config_json, const std::string& source);
// model_type_of_config(dir/config.json).
const ModelType& model_type_of_dir(const std::string& dir);
// model_type_of_dir(dir), which must be of `kind`; else throws
// "`<command>` needs a GPT model; [<flag> ]<dir> holds a bert model".
const ModelType& require_model_kind(const std::string& dir, ModelKind kind, const char* command,
                                    const std::string& flag = "");

}  // namespace attnkit
