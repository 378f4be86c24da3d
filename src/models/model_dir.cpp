// Model directories (config.json + model.safetensors): atomic save, validated load.
#include "attnkit/models/model_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "attnkit/core/error.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/io/safetensors.hpp"
#include "attnkit/nn/parallel_blocks.hpp"  // first_non_finite

namespace attnkit {

void save_model_dir(const std::string& dir, const std::string& config_json,
                    std::span<const TensorGroup> groups, const char* who) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, who, ": cannot create directory ", dir, ": ", ec.message());
  std::vector<TensorToWrite> tensors;
  for (const TensorGroup& g : groups)
    for (const ParameterInfo& p : *g.info) {
      check(p.offset >= 0 && p.offset + p.numel <= int64_t(g.data.size()), who, ": tensor '",
            p.name, "' lies outside its buffer");
      tensors.push_back({p.name, DType::f32, p.shape,
                         std::as_bytes(g.data.subspan(size_t(p.offset), size_t(p.numel)))});
    }
  save_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  write_model_config(dir, config_json, who);
}

void write_model_config(const std::string& dir, const std::string& config_json, const char* who) {
  const std::string tmp = dir + "/config.json.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << config_json;
    out.flush();
    check(bool(out), who, ": cannot write ", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, dir + "/config.json", ec);
  check(!ec, who, ": cannot rename ", tmp, ": ", ec.message());
}

std::string read_model_config(const std::string& dir, const char* who) {
  return read_file(dir + "/config.json", who);
}

void load_model_tensors(const std::string& dir, const std::vector<ParameterInfo>& info,
                        std::span<float> dst, const char* who) {
  const std::string path = dir + "/model.safetensors";
  const SafetensorsFile file(path);
  for (const ParameterInfo& p : info) {
    const TensorInfo* t = file.find(p.name);
    check(t != nullptr, who, ": ", path, " has no tensor '", p.name, "'");
    check(t->shape == p.shape, who, ": tensor '", p.name, "' in ", path,
          " has the wrong shape for this config");
    check(p.offset >= 0 && p.offset + p.numel <= int64_t(dst.size()), who, ": tensor '", p.name,
          "' lies outside its buffer");
    const std::vector<float> values = file.read_f32(p.name);
    // A NaN or infinite weight would make every output NaN without a word; refuse it by name.
    if (const int64_t bad = nn::first_non_finite(values); bad >= 0)
      fail(who, ": tensor '", p.name, "' in ", path, " holds a non-finite value (", values[size_t(bad)],
           ") at element ", bad);
    std::copy(values.begin(), values.end(), dst.begin() + p.offset);
  }
}

}  // namespace attnkit
