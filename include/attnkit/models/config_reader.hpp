#pragma once
// Reading and writing a model's config.json, one way for every model (GPT, BERT, ViT, CNN,
// deformable): typed getters whose errors name the key and the file, one rule for unknown keys,
// id2label / label2id / num_labels in one place, and upper bounds on sizes.
//
// Errors read "<source>: '<key>' must be ...", where source is the file ("dir/config.json", or
// "config.json" when parsing text that has no file).
// Unknown keys: ConfigReader::finish() refuses every key that no getter read and that is not in
// kIgnoredConfigKeys (keys Hugging Face writes that do not change what attnkit computes), so a
// misspelt key is never silently replaced by its default.
// Sizes: ConfigReader::size() takes values in [1, limit] only, with the limits below, so a config
// asking for 1e12 of anything is refused, naming the key, before anything is allocated.
// Labels: id2label ({"0": name, ..., "K-1": name}) decides num_labels when present; a num_labels
// or label2id that disagrees with it is refused. ConfigWriter::labels() writes num_labels,
// id2label and label2id.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnkit/core/error.hpp"

namespace attnkit {

inline constexpr int64_t kMaxConfigWidth = int64_t(1) << 16;      // hidden_size, d_model, widths
inline constexpr int64_t kMaxConfigFfnWidth = int64_t(1) << 18;   // intermediate_size, ffn_dim
inline constexpr int64_t kMaxConfigLayers = 1024;                 // num_hidden_layers, layers
inline constexpr int64_t kMaxConfigHeads = 1024;                  // attention and key/value heads
inline constexpr int64_t kMaxConfigHeadDim = 4096;                // head_dim
inline constexpr int64_t kMaxConfigVocab = int64_t(1) << 22;      // vocab_size (4,194,304)
inline constexpr int64_t kMaxConfigPositions = int64_t(1) << 22;  // max_position_embeddings
inline constexpr int64_t kMaxConfigImageSide = int64_t(1) << 14;  // image_size, patch_size
inline constexpr int64_t kMaxConfigLabels = int64_t(1) << 20;     // num_labels

// Keys accepted and ignored by every model: Hugging Face bookkeeping that changes no result.
inline constexpr const char* kIgnoredConfigKeys[] = {
    "_name_or_path", "transformers_version", "torch_dtype", "use_cache", "bos_token_id",
    "eos_token_id", "gradient_checkpointing", "pretraining_tp", "return_dict",
    "output_hidden_states", "output_attentions", "tokenizer_class", "problem_type"};

// Class names of a classifier: num_labels and, if named, one name per class.
struct ConfigLabels {
  int64_t num_labels = 0;
  std::vector<std::string> names;  // empty, or num_labels entries
};

// Typed, checked access to one config.json object. Every getter marks its key as read.
class ConfigReader {
 public:
  // Parses json_text (must be a JSON object); `source` names the file in every error.
  ConfigReader(const std::string& json_text, std::string source = "config.json");
  ~ConfigReader();
  ConfigReader(const ConfigReader&) = delete;
  ConfigReader& operator=(const ConfigReader&) = delete;

  const std::string& source() const { return source_; }
  // True if the key is present and not null.
  bool has(const char* key) const;

  // Integer value; the first form requires the key.
  int64_t integer(const char* key);
  int64_t integer(const char* key, int64_t fallback);
  // A size in [1, limit] (use the kMaxConfig* limits); the first form requires the key.
  int64_t size(const char* key, int64_t limit);
  int64_t size(const char* key, int64_t fallback, int64_t limit);
  // Any JSON number.
  double number(const char* key, double fallback);
  bool boolean(const char* key, bool fallback);
  std::string string(const char* key, const std::string& fallback);
  // An integer array (or, with scalar_ok, a single integer read as a one-entry array).
  std::vector<int64_t> integers(const char* key, std::vector<int64_t> fallback, bool scalar_ok = false);
  // A string array (e.g. "architectures"); empty if absent.
  std::vector<std::string> strings(const char* key);
  // One of `names` (a string), mapped to its value; the error lists the choices.
  template <class E, size_t N>
  E choice(const char* key, E fallback, const std::pair<const char*, E> (&names)[N]) {
    if (!read(key)) return fallback;
    const std::string v = string(key, "");
    for (const auto& [name, e] : names)
      if (v == name) return e;
    std::string allowed;
    for (const auto& [name, e] : names) allowed += std::string(allowed.empty() ? "" : ", ") + name;
    fail_key(key, "must be one of ", allowed, "; got '", v, "'");
  }
  // Requires `key` to be absent or null, or to equal `value` (a JSON literal such as "false",
  // "0.0" or "\"absolute\""): for Hugging Face options attnkit implements only one way.
  void require_value(const char* key, const char* value);
  // Checks "model_type": it must be one of `types` (required: it must be present).
  void model_type(std::initializer_list<const char*> types, bool required);
  // Reads id2label, label2id and num_labels (default_num_labels if none is given).
  ConfigLabels labels(int64_t default_num_labels);

  // Throws "<source>: '<key>' <parts...>".
  template <class... Parts>
  [[noreturn]] void fail_key(const char* key, const Parts&... parts) const {
    fail(source_, ": '", key, "' ", parts...);
  }
  // Runs validate() (a config struct's range checks) and prefixes its error with the file.
  template <class F>
  void validate_with(F&& validate) const {
    try {
      validate();
    } catch (const Error& e) {
      std::string m = e.what();
      const size_t p = m.find("config: ");
      if (p != std::string::npos && p < 16) m = m.substr(p + 8);
      fail(source_, ": ", m);
    }
  }
  // Throws for the first key that no getter read and that kIgnoredConfigKeys does not list.
  void finish() const;

 private:
  struct Json;
  void mark(std::string_view key);
  // Marks key read; true if it is present and not null (a getter then reads its value).
  bool read(const char* key) {
    mark(key);
    return has(key);
  }
  std::unique_ptr<Json> json_;
  std::string source_;
  std::vector<std::string> read_;
};

// Builds config.json text, keys in insertion order.
class ConfigWriter {
 public:
  ConfigWriter();
  ~ConfigWriter();
  ConfigWriter(const ConfigWriter&) = delete;
  ConfigWriter& operator=(const ConfigWriter&) = delete;

  ConfigWriter& set(const char* key, int64_t v);
  ConfigWriter& set(const char* key, int v) { return set(key, int64_t(v)); }
  ConfigWriter& set(const char* key, double v);
  ConfigWriter& set(const char* key, bool v);
  ConfigWriter& set(const char* key, const char* v);
  ConfigWriter& set(const char* key, const std::string& v) { return set(key, v.c_str()); }
  ConfigWriter& set(const char* key, std::span<const int64_t> v);
  ConfigWriter& set(const char* key, std::span<const std::string> v);
  ConfigWriter& set(const char* key, const std::string* v) = delete;  // an array: pass a span
  // "architectures": [architecture] and "model_type" (Hugging Face's first two keys).
  ConfigWriter& architecture(const std::string& architecture, const char* model_type);
  // num_labels, and id2label + label2id when `names` is not empty.
  ConfigWriter& labels(int64_t num_labels, const std::vector<std::string>& names);
  // The JSON text, indented by 2, with a final newline.
  std::string text() const;

 private:
  struct Json;
  std::unique_ptr<Json> json_;
};

}  // namespace attnkit
