#pragma once
// A model's named tensors and their storage, shared by every model (GPT, BERT, ViT, CNN,
// deformable): the layout (Hugging Face names, shapes, offsets, in buffer order), a name → tensor
// index built once, and three flat float buffers: parameters, their gradients (same layout), and
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
  // Sizes the three buffers to the layout, all zeros.
  void allocate();

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

  const char* owner_;
  std::vector<ParameterInfo> info_, buffer_info_;
  std::unordered_map<std::string, size_t> index_, buffer_index_;
  int64_t numel_ = 0, buffer_numel_ = 0;
  std::vector<float> params_, grads_, buffers_;
};

}  // namespace attnkit
