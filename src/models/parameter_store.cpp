// ParameterStore: layout, name index, storage, and load/save through model_dir.
#include "attnkit/models/parameter_store.hpp"

#include <algorithm>

#include "attnkit/core/error.hpp"
#include "attnkit/models/model_dir.hpp"
#include "attnkit/nn/parallel_blocks.hpp"

namespace attnkit {
namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

void ParameterStore::add(std::string name, std::vector<int64_t> shape) {
  const int64_t n = numel_of(shape);
  check(index_.emplace(name, info_.size()).second, owner_, ": tensor '", name, "' added twice");
  info_.push_back({std::move(name), std::move(shape), numel_, n});
  numel_ += n;
}

void ParameterStore::add_buffer(std::string name, std::vector<int64_t> shape) {
  const int64_t n = numel_of(shape);
  check(buffer_index_.emplace(name, buffer_info_.size()).second, owner_, ": buffer '", name,
        "' added twice");
  buffer_info_.push_back({std::move(name), std::move(shape), buffer_numel_, n});
  buffer_numel_ += n;
}

void ParameterStore::add_linear(const std::string& prefix, int64_t out, int64_t in) {
  add(prefix + ".weight", {out, in});
  add(prefix + ".bias", {out});
}

void ParameterStore::add_norm(const std::string& prefix, int64_t c) {
  add(prefix + ".weight", {c});
  add(prefix + ".bias", {c});
}

void ParameterStore::add_batch_norm(const std::string& prefix, int64_t c) {
  add_norm(prefix, c);
  add_buffer(prefix + ".running_mean", {c});
  add_buffer(prefix + ".running_var", {c});
}

void ParameterStore::allocate() {
  params_.assign(size_t(numel_), 0.0f);
  grads_.assign(size_t(numel_), 0.0f);
  buffers_.assign(size_t(buffer_numel_), 0.0f);
  reset_buffers();
}

void ParameterStore::reset_buffers() {
  for (const ParameterInfo& b : buffer_info_)
    std::fill_n(buffers_.begin() + b.offset, b.numel, b.name.ends_with("running_var") ? 1.0f : 0.0f);
}

const ParameterInfo& ParameterStore::info(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  if (it == index_.end()) fail(owner_, ": no parameter named '", name, "'");
  return info_[it->second];
}

const ParameterInfo& ParameterStore::buffer_info(std::string_view name) const {
  const auto it = buffer_index_.find(std::string(name));
  if (it == buffer_index_.end()) fail(owner_, ": no buffer named '", name, "'");
  return buffer_info_[it->second];
}

std::span<const float> ParameterStore::parameter(std::string_view name) const {
  const ParameterInfo& p = info(name);
  return {params_.data() + p.offset, size_t(p.numel)};
}

ConstView2 ParameterStore::matrix(std::string_view name) const {
  const ParameterInfo& p = info(name);
  return ConstView2::contiguous(params_.data() + p.offset, {p.shape[0], p.numel / p.shape[0]});
}

View2 ParameterStore::grad_matrix(std::string_view name) {
  const ParameterInfo& p = info(name);
  return View2::contiguous(grads_.data() + p.offset, {p.shape[0], p.numel / p.shape[0]});
}

TensorId ParameterStore::id(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  if (it == index_.end()) fail(owner_, ": no parameter named '", name, "'");
  return {int32_t(it->second)};
}

TensorId ParameterStore::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? TensorId{} : TensorId{int32_t(it->second)};
}

TensorId ParameterStore::buffer_id(std::string_view name) const {
  const auto it = buffer_index_.find(std::string(name));
  if (it == buffer_index_.end()) fail(owner_, ": no buffer named '", name, "'");
  return {int32_t(it->second)};
}

LayerIds ParameterStore::layer(const std::string& prefix) const {
  return {id(prefix + ".weight"), find(prefix + ".bias")};
}

LayerIds ParameterStore::find_layer(const std::string& prefix) const {
  return {find(prefix + ".weight"), find(prefix + ".bias")};
}

BatchNormIds ParameterStore::batch_norm(const std::string& prefix) const {
  return {layer(prefix), buffer_id(prefix + ".running_mean"), buffer_id(prefix + ".running_var")};
}

ParameterStore::Extent ParameterStore::extent(TensorId t, int64_t rows) const {
  const ParameterInfo& p = info_[size_t(t.index)];
  const int64_t width = p.numel / p.shape[0];
  return {p.offset, rows > 0 ? rows : p.shape[0], width};
}

std::span<const float> ParameterStore::vec(TensorId t, int64_t rows) const {
  if (!t) return {};
  const Extent e = extent(t, rows);
  return {params_.data() + e.offset, size_t(e.rows * e.width)};
}

std::span<float> ParameterStore::grad_vec(TensorId t, int64_t rows) {
  if (!t) return {};
  const Extent e = extent(t, rows);
  return {grads_.data() + e.offset, size_t(e.rows * e.width)};
}

ConstView2 ParameterStore::matrix(TensorId t, int64_t rows) const {
  if (!t) return {};
  const Extent e = extent(t, rows);
  return ConstView2::contiguous(params_.data() + e.offset, {e.rows, e.width});
}

View2 ParameterStore::grad_matrix(TensorId t, int64_t rows) {
  if (!t) return {};
  const Extent e = extent(t, rows);
  return View2::contiguous(grads_.data() + e.offset, {e.rows, e.width});
}

std::span<float> ParameterStore::parameter(TensorId t) {
  if (!t) return {};
  return slice(params_, info_[size_t(t.index)]);
}

std::span<float> ParameterStore::buffer(TensorId t) {
  if (!t) return {};
  return slice(buffers_, buffer_info_[size_t(t.index)]);
}

void ParameterStore::zero_grad() { nn::parallel_fill(grads_, 0.0f); }

void ParameterStore::save(const std::string& dir, const std::string& config_json) const {
  const TensorGroup groups[] = {{&info_, params_}, {&buffer_info_, buffers_}};
  save_model_dir(dir, config_json, groups, (std::string(owner_) + ".save").c_str());
}

void ParameterStore::load(const std::string& dir) {
  const std::string who = std::string(owner_) + ".load";
  load_model_tensors(dir, info_, params_, who.c_str());
  load_model_tensors(dir, buffer_info_, buffers_, who.c_str());
}

}  // namespace attnkit
