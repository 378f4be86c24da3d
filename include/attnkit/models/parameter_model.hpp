#pragma once
// What every model (GptModel, BertModel, ImageClassifier: ViT, CNN, deformable) exposes of its
// ParameterStore: the layout, the flat parameter / gradient / buffer spans an optimizer and the
// trainers use, look-ups by Hugging Face name (cold paths: tests, tools, conversion), and to the
// model's own forward/backward, views by the handles it resolved once at construction.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attnkit/models/parameter_store.hpp"

namespace attnkit {

class ParameterModel {
 public:
  // Trainable tensors: names, shapes and offsets into parameters() / gradients().
  const std::vector<ParameterInfo>& parameter_info() const { return store_.info(); }
  std::span<float> parameters() { return store_.parameters(); }
  std::span<const float> parameters() const { return store_.parameters(); }
  std::span<float> gradients() { return store_.gradients(); }
  // Number of trainable floats.
  int64_t parameter_count() const { return int64_t(store_.parameters().size()); }
  // Non-trainable saved state (e.g. "...running_mean"); empty for models without any.
  const std::vector<ParameterInfo>& buffer_info() const { return store_.buffer_info(); }
  std::span<float> buffers() { return store_.buffers(); }
  std::span<const float> buffers() const { return store_.buffers(); }
  // True if the model has a trainable tensor of that name.
  bool has(const std::string& name) const { return store_.has(name); }
  // The named tensor's parameter slice / layout entry; throws attnkit::Error if unknown.
  std::span<float> parameter(const std::string& name) { return store_.parameter(name); }
  const ParameterInfo& info(const std::string& name) const { return store_.info(name); }
  // Sets gradients() to zero.
  void zero_grad() { store_.zero_grad(); }
  // Reads every parameter and buffer from dir/model.safetensors (shapes must match this
  // architecture; config.json is not read).
  void load_weights(const std::string& dir) { store_.load(dir); }

 protected:
  // `owner` (the class name) prefixes the store's errors.
  explicit ParameterModel(const char* owner) : store_(owner) {}
  ParameterModel(ParameterModel&&) noexcept = default;
  ParameterModel& operator=(ParameterModel&&) noexcept = default;
  ~ParameterModel() = default;

  // Views by handle for the model's forward and backward (no look-up; see ParameterStore).
  ConstView2 matrix(TensorId t) const { return store_.matrix(t); }
  std::span<const float> vec(TensorId t) const { return store_.vec(t); }
  std::span<float> param(TensorId t) { return store_.parameter(t); }
  View2 grad_matrix(TensorId t) { return store_.grad_matrix(t); }
  std::span<float> grad_vec(TensorId t) { return store_.grad_vec(t); }

  ParameterStore store_;  // the model lays out its tensors in its constructor
};

}  // namespace attnkit
