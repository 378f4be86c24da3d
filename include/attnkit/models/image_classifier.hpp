#pragma once
// The interface shared by attnkit's image classifiers (CNN with SE/CBAM, ViT, deformable
// encoder): the image trainer (train/image_trainer.hpp), `attnkit train|classify|eval` and the
// Python module use every model through it.
//
// Images are NCHW float32 [N, C, H, W] (contiguous), already scaled and standardised
// (train/image_batch.hpp); logits are [N, K]. forward() keeps the activations its backward()
// needs (the llm.c way: no autograd graph). Parameters and their gradients each live in one
// flat float buffer addressed by named tensors (Hugging Face names where the architecture has
// them); non-trainable state (batch-norm running statistics) lives in a separate buffer that is
// saved with the weights but never seen by the optimizer.
// A model directory holds config.json (with "model_type": "cnn" | "vit" | "deformable") and
// model.safetensors (parameters and buffers).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnkit/core/tensor.hpp"
#include "attnkit/models/parameter_info.hpp"
#include "attnkit/models/parameter_model.hpp"

namespace attnkit {

// Input image geometry a model expects.
struct ImageShape {
  int64_t channels = 1, height = 28, width = 28;
};

class ImageClassifier : public ParameterModel {
 public:
  virtual ~ImageClassifier() = default;

  // The config's "model_type": "cnn", "vit" or "deformable".
  virtual std::string model_type() const = 0;
  // Input geometry [C, H, W] and number of classes K.
  virtual ImageShape input_shape() const = 0;
  virtual int64_t num_classes() const = 0;
  // config.json text that recreates this architecture (make_image_classifier reads it back).
  virtual std::string config_json() const = 0;

  // Fresh weights (the architecture's usual initialisation), deterministic in seed; resets buffers.
  virtual void init_random(uint64_t seed) = 0;
  // Training mode: batch statistics (and running-statistics updates), dropout keyed by seed (a
  // new seed per step). Eval mode (the default) is deterministic.
  virtual void set_training(bool training, uint64_t seed = 0) = 0;
  // logits [N, K] of x [N, C, H, W] (shape must match input_shape()); valid until the next
  // forward. Keeps the activations for backward().
  virtual ConstView2 forward(ConstView4 x) = 0;
  // Adds (+=) into gradients() the gradient of a loss whose gradient with respect to the last
  // forward's logits is d_logits [N, K].
  virtual void backward(ConstView2 d_logits) = 0;

  // Writes config.json and model.safetensors (parameters and buffers) to dir, atomically.
  void save(const std::string& dir) const;

 protected:
  // `owner` (the class name) prefixes the store's errors.
  explicit ImageClassifier(const char* owner) : ParameterModel(owner) {}
  ImageClassifier(ImageClassifier&&) = default;
  ImageClassifier& operator=(ImageClassifier&&) = default;
};

// An image classifier built from a `Config` (with num_labels) that ToJson serialises: it holds
// the config and answers config(), num_classes() and config_json() from it.
template <class Config, std::string (*ToJson)(const Config&)>
class ConfiguredImageClassifier : public ImageClassifier {
 public:
  // The configuration this model was built from.
  const Config& config() const { return config_; }
  // num_labels (K).
  int64_t num_classes() const override { return config_.num_labels; }
  // ToJson(config()).
  std::string config_json() const override { return ToJson(config_); }

 protected:
  ConfiguredImageClassifier(const char* owner, const Config& config)
      : ImageClassifier(owner), config_(config) {}

  Config config_;
};

// A model of the architecture config.json text describes, with zero weights ("model_type"
// picks the class in models/model_registry.hpp; unknown types and invalid keys throw
// attnkit::Error naming the key and `source`, the file).
std::unique_ptr<ImageClassifier> make_image_classifier(const std::string& config_json,
                                                       const std::string& source = "config.json");
// make_image_classifier(dir/config.json) with the weights of dir/model.safetensors.
std::unique_ptr<ImageClassifier> load_image_classifier(const std::string& dir);

}  // namespace attnkit
