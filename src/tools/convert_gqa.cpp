// MHA → GQA checkpoint conversion: pools the K/V projection rows of each group of KV heads
// (mean, first or a random head) and rewrites config.json's num_key_value_heads.
#include "attnkit/tools/convert_gqa.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "attnkit/core/dtype.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/core/rng.hpp"
#include "attnkit/io/safetensors.hpp"
#include "attnkit/models/model_dir.hpp"

namespace attnkit {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A K or V projection tensor: "<prefix>layers.<L>.self_attn.{k,v}_proj.{weight,bias}".
bool is_kv_projection(const std::string& name) {
  for (const char* s : {"self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.k_proj.bias",
                        "self_attn.v_proj.bias"})
    if (ends_with(name, s)) return true;
  return false;
}

// The layer number after "layers." in a tensor name (0 if there is none).
uint32_t layer_of(const std::string& name) {
  const auto at = name.rfind("layers.");
  if (at == std::string::npos) return 0;
  return uint32_t(std::strtoul(name.c_str() + at + 7, nullptr, 10));
}

bool is_inside(const fs::path& child, const fs::path& parent) {  // child == parent or below it
  auto c = child.begin();
  for (auto p = parent.begin(); p != parent.end(); ++p, ++c)
    if (c == child.end() || *c != *p) return false;
  return true;
}

void check_directories(const std::string& in_dir, const std::string& out_dir) {
  check(!out_dir.empty(), "--out: a directory is required");
  check(fs::is_directory(in_dir), "--in: ", in_dir, " is not a directory");
  const fs::path in = fs::weakly_canonical(in_dir), out = fs::weakly_canonical(out_dir);
  check(!is_inside(out, in), "--out: ", out_dir, " is --in or inside it; the input is never overwritten");
  if (fs::exists(out)) {
    check(fs::is_directory(out), "--out: ", out_dir, " exists and is not a directory");
    check(fs::is_empty(out), "--out: ", out_dir, " exists and is not empty");
  }
}

int64_t config_int(const ordered_json& j, const char* key, int64_t fallback) {
  if (!j.contains(key) || j[key].is_null()) {
    check(fallback > 0, "config: missing required key '", key, "'");
    return fallback;
  }
  check(j[key].is_number_integer() && j[key].get<int64_t>() >= 1, "config: '", key,
        "' must be a positive integer");
  return j[key].get<int64_t>();
}

void store_f32(std::vector<std::byte>& out, size_t index, float x, DType t) {
  if (t == DType::f32) {
    std::memcpy(out.data() + index * 4, &x, 4);
  } else {
    const uint16_t h = t == DType::f16 ? f32_to_f16(x) : f32_to_bf16(x);
    std::memcpy(out.data() + index * 2, &h, 2);
  }
}

// The pooled bytes of one K/V tensor [Hkv0·D, in] (or bias [Hkv0·D]) → [N·D, in].
std::vector<std::byte> pool_tensor(const SafetensorsFile& file, const TensorInfo& t, int64_t old_kv,
                                   int64_t head_dim, const ConvertGqaOptions& o) {
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  check(!t.shape.empty() && t.shape.size() <= 2 && rows == old_kv * head_dim, "convert-gqa: tensor '",
        t.name, "' has ", rows, " rows; expected num_key_value_heads × head_dim = ", old_kv * head_dim);
  const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
  const int64_t m = old_kv / o.kv_heads, head_numel = head_dim * cols;
  const size_t esize = dtype_size(t.dtype);
  std::vector<std::byte> out(size_t(o.kv_heads * head_numel) * esize);
  const auto src = file.bytes(t);
  if (o.method != GqaPoolMethod::mean) {  // copy one head's rows byte for byte
    for (int64_t g = 0; g < o.kv_heads; ++g) {
      int64_t pick = 0;
      if (o.method == GqaPoolMethod::random)
        pick = int64_t(philox4x32(o.seed, {layer_of(t.name), uint32_t(g), 0, 0})[0] % uint32_t(m));
      std::memcpy(out.data() + size_t(g * head_numel) * esize,
                  src.data() + size_t((g * m + pick) * head_numel) * esize, size_t(head_numel) * esize);
    }
    return out;
  }
  check(t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16, "convert-gqa: tensor '",
        t.name, "' has dtype ", dtype_name(t.dtype), "; mean pooling needs F32, F16 or BF16");
  const std::vector<float> x = file.read_f32(t.name);
  for (int64_t g = 0; g < o.kv_heads; ++g)
    for (int64_t e = 0; e < head_numel; ++e) {
      double sum = 0;  // heads in order, in double: one rounding to the stored dtype
      for (int64_t j = 0; j < m; ++j) sum += double(x[size_t((g * m + j) * head_numel + e)]);
      store_f32(out, size_t(g * head_numel + e), float(sum / double(m)), t.dtype);
    }
  return out;
}

}  // namespace

GqaPoolMethod parse_gqa_pool_method(const std::string& name, const char* arg) {
  if (name == "mean") return GqaPoolMethod::mean;
  if (name == "first") return GqaPoolMethod::first;
  if (name == "random") return GqaPoolMethod::random;
  fail(arg, ": expected mean, first or random; got '", name, "'");
}

void convert_gqa(const std::string& in_dir, const std::string& out_dir, const ConvertGqaOptions& o) {
  check_directories(in_dir, out_dir);
  ordered_json config;
  try {
    config = ordered_json::parse(read_file(in_dir + "/config.json", "convert-gqa"));
  } catch (const nlohmann::json::exception& e) {
    fail("config: ", in_dir, "/config.json is not valid JSON (", e.what(), ")");
  }
  check(config.is_object(), "config: top level must be a JSON object");
  const int64_t heads = config_int(config, "num_attention_heads", 0);
  const int64_t old_kv = config_int(config, "num_key_value_heads", heads);
  const int64_t head_dim = config.contains("head_dim") && !config["head_dim"].is_null()
                               ? config_int(config, "head_dim", 0)
                               : config_int(config, "hidden_size", 0) / heads;
  check(head_dim >= 1 && heads % old_kv == 0, "config: num_attention_heads (", heads,
        ") must be a multiple of num_key_value_heads (", old_kv, ")");
  check(o.kv_heads >= 1 && old_kv % o.kv_heads == 0, "--kv-heads: ", o.kv_heads,
        " must divide the checkpoint's num_key_value_heads (", old_kv,
        old_kv == heads ? ", = num_attention_heads" : "", ")");

  const SafetensorsFile file(in_dir + "/model.safetensors");
  std::vector<std::vector<std::byte>> pooled;  // owns the rewritten tensors
  pooled.reserve(file.tensors().size());
  std::vector<TensorToWrite> tensors;
  int64_t rewritten = 0;
  for (const auto& t : file.tensors()) {
    if (!is_kv_projection(t.name)) {
      tensors.push_back({t.name, t.dtype, t.shape, file.bytes(t)});
      continue;
    }
    pooled.push_back(pool_tensor(file, t, old_kv, head_dim, o));
    std::vector<int64_t> shape = t.shape;
    shape[0] = o.kv_heads * head_dim;
    tensors.push_back({t.name, t.dtype, shape, pooled.back()});
    ++rewritten;
  }
  check(rewritten > 0, "convert-gqa: ", in_dir,
        "/model.safetensors has no *.self_attn.k_proj.weight / v_proj.weight tensors (Llama names)");
  config["num_key_value_heads"] = o.kv_heads;

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  check(!ec, "--out: cannot create ", out_dir, ": ", ec.message());
  save_safetensors(out_dir + "/model.safetensors", tensors, file.metadata());
  write_model_config(out_dir, config.dump(2) + "\n", "convert-gqa");
}

}  // namespace attnkit
