#pragma once
// A model directory as Hugging Face lays it out: config.json (text) + model.safetensors (F32
// tensors named by ParameterInfo). Shared by the image models; both files are written
// atomically (temporary file, fsync, rename), so an interrupted save leaves the last good one.
#include <span>
#include <string>
#include <vector>

#include "attnkit/models/parameter_info.hpp"

namespace attnkit {

// One group of named tensors living in one flat float buffer (parameters, or buffers such as
// batch-norm running statistics).
struct TensorGroup {
  const std::vector<ParameterInfo>* info;
  std::span<const float> data;  // every info entry's [offset, offset + numel) lies inside
};

// Creates dir if needed and writes dir/model.safetensors (every tensor of every group, F32) and
// dir/config.json (config_json verbatim). Throws attnkit::Error prefixed with `who`.
void save_model_dir(const std::string& dir, const std::string& config_json,
                    std::span<const TensorGroup> groups, const char* who);

// Writes dir/config.json (config_json verbatim) atomically (config.json.tmp, then rename);
// throws attnkit::Error prefixed with `who`.
void write_model_config(const std::string& dir, const std::string& config_json, const char* who);

// The text of dir/config.json; throws attnkit::Error prefixed with `who` if unreadable.
std::string read_model_config(const std::string& dir, const char* who);

// A Model (GptModel, BertModel) built from dir/config.json through parse(text, path), with the
// weights of dir/model.safetensors (Model::load_weights); `who` prefixes errors.
template <class Model, class Parse>
Model load_model_dir(const std::string& dir, Parse parse, const char* who) {
  Model model(parse(read_model_config(dir, who), dir + "/config.json"));
  model.load_weights(dir);
  return model;
}

// Fills `dst` from dir/model.safetensors: every tensor of `info` must be present with exactly
// its shape (F32, F16 or BF16; converted to float32). Extra tensors in the file are ignored.
// Throws attnkit::Error naming the file and the tensor; on error `dst` may be partly written.
void load_model_tensors(const std::string& dir, const std::vector<ParameterInfo>& info,
                        std::span<float> dst, const char* who);

}  // namespace attnkit
