#pragma once
// A model's named tensors and their storage, shared by every model (GPT, BERT, ViT, CNN,
// deformable): the layout (Hugging Face names, shapes, offsets, in buffer order), a name → tensor
// index built once, handles (TensorId) that models resolve from names once and use on hot paths
// with no look-up, and three flat float buffers: parameters, their gradients (same layout), and
// non-trainable buffers (batch-norm running statistics) with a layout of their own. An optimizer
// sees one span; save/load go through model_dir.hpp with the same names.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "attnkit/core/tensor.hpp"
#include "attnkit/models/parameter_info.hpp"

namespace attnkit {

// A tensor's position in a ParameterStore's layout (parameters, or buffers for buffer_id),
// resolved once from its name; default-constructed = absent (an optional tensor not in the
// layout), whose views are empty.
struct TensorId {
  int32_t index = -1;
  explicit operator bool() const { return index >= 0; }
};

// The weight and bias of one layer (Linear, LayerNorm, RMSNorm, batch norm, conv): the bias
// is absent where the layer has none.
struct LayerIds {
  TensorId weight, bias;
};

// A batch norm's affine weight and bias (parameters) and running statistics (buffers).
struct BatchNormIds {
  LayerIds affine;
  TensorId running_mean, running_var;
};

class ParameterStore {
 public:
  // `owner` ("GptModel", ...) prefixes error messages.
  explicit ParameterStore(const char* owner = "model") : owner_(owner) {}

  // Appends a trainable tensor / a non-trainable buffer to the layout; call allocate() after the
  // last one. Names must be unique within their group.
  void add(std::string name, std::vector<int64_t> shape);
  void add_buffer(std::string name, std::vector<int64_t> shape);
  // prefix.weight [out, in] and prefix.bias [out] (a Linear layer, Hugging Face naming).
  void add_linear(const std::string& prefix, int64_t out, int64_t in);
  // prefix.weight [c] and prefix.bias [c] (a LayerNorm).
  void add_norm(const std::string& prefix, int64_t c);
  // add_norm(prefix, c) and the buffers prefix.running_mean, prefix.running_var [c] (a batch norm).
  void add_batch_norm(const std::string& prefix, int64_t c);
  // Sizes the three buffers to the layout: parameters and gradients zero, buffers as reset_buffers().
  void allocate();
  // Batch-norm running variances (buffers named *running_var) to one, every other buffer to zero.
  void reset_buffers();

  const std::vector<ParameterInfo>& info() const { return info_; }
  const std::vector<ParameterInfo>& buffer_info() const { return buffer_info_; }
  std::span<float> parameters() { return params_; }
  std::span<const float> parameters() const { return params_; }
  std::span<float> gradients() { return grads_; }
  std::span<const float> gradients() const { return grads_; }
  std::span<float> buffers() { return buffers_; }
  std::span<const float> buffers() const { return buffers_; }

  // Look-ups by name (a hash map, no scan); the throwing forms name the tensor.
  bool has(std::string_view name) const { return index_.count(std::string(name)) > 0; }
  const ParameterInfo& info(std::string_view name) const;
  const ParameterInfo& buffer_info(std::string_view name) const;
  // The named tensor's floats in the parameter, gradient or buffer storage.
  std::span<float> parameter(std::string_view name) { return slice(params_, info(name)); }
  std::span<const float> parameter(std::string_view name) const;
  std::span<float> gradient(std::string_view name) { return slice(grads_, info(name)); }
  std::span<float> buffer(std::string_view name) { return slice(buffers_, buffer_info(name)); }
  // The named tensor as a matrix [shape[0], numel / shape[0]] (a 4-D kernel flattens its tail).
  ConstView2 matrix(std::string_view name) const;
  View2 grad_matrix(std::string_view name);

  // Handles, resolved once (throwing forms name the tensor); find() gives an absent id for a
  // name not in the layout.
  TensorId id(std::string_view name) const;
  TensorId find(std::string_view name) const;
  TensorId buffer_id(std::string_view name) const;
  // prefix.weight and prefix.bias (the bias absent where the layout has none).
  LayerIds layer(const std::string& prefix) const;
  // The same, each absent where the layout has no such tensor (an optional layer).
  LayerIds find_layer(const std::string& prefix) const;
  // A batch norm added by add_batch_norm(prefix, c).
  BatchNormIds batch_norm(const std::string& prefix) const;
  // Views by handle, no look-up: the tensor's floats (empty for an absent id) and the tensor as a
  // matrix [shape[0], numel / shape[0]]. `rows` > 0 extends the view over the tensors that
  // follow it in the layout, as one [rows, width] matrix / [rows] vector (fused q/k/v).
  std::span<const float> vec(TensorId t, int64_t rows = 0) const;
  std::span<float> grad_vec(TensorId t, int64_t rows = 0);
  ConstView2 matrix(TensorId t, int64_t rows = 0) const;
  View2 grad_matrix(TensorId t, int64_t rows = 0);
  std::span<float> parameter(TensorId t);
  std::span<float> buffer(TensorId t);

  // Gradients to zero (parallel blocks).
  void zero_grad();
  // Writes dir/config.json (config_json verbatim) and dir/model.safetensors (parameters and
  // buffers, F32, by name), atomically.
  void save(const std::string& dir, const std::string& config_json) const;
  // Reads every parameter and buffer from dir/model.safetensors (shapes must match; extra
  // tensors in the file are ignored).
  void load(const std::string& dir);

 private:
  static std::span<float> slice(std::vector<float>& v, const ParameterInfo& p) {
    return {v.data() + p.offset, size_t(p.numel)};
  }
  // Offset, row count and row width of tensor t (extended to `rows` rows if rows > 0).
  struct Extent {
    int64_t offset = 0, rows = 0, width = 0;
  };
  Extent extent(TensorId t, int64_t rows) const;

  const char* owner_;
  std::vector<ParameterInfo> info_, buffer_info_;
  std::unordered_map<std::string, size_t> index_, buffer_index_;
  int64_t numel_ = 0, buffer_numel_ = 0;
  std::vector<float> params_, grads_, buffers_;
};

}  // namespace attnkit
