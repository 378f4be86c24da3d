// ConfigReader / ConfigWriter: config.json access with errors naming the key and the file.
#include "attnkit/models/config_reader.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace attnkit {

struct ConfigReader::Json {
  nlohmann::json j;
};
struct ConfigWriter::Json {
  nlohmann::ordered_json j;
};

ConfigReader::ConfigReader(const std::string& json_text, std::string source)
    : json_(std::make_unique<Json>()), source_(std::move(source)) {
  try {
    json_->j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail(source_, ": invalid JSON (", e.what(), ")");
  }
  check(json_->j.is_object(), source_, ": the top level must be a JSON object");
}

ConfigReader::~ConfigReader() = default;

bool ConfigReader::has(const char* key) const {
  return json_->j.contains(key) && !json_->j[key].is_null();
}

void ConfigReader::mark(std::string_view key) { read_.emplace_back(key); }

int64_t ConfigReader::integer(const char* key) {
  if (!has(key)) fail(source_, ": missing required key '", key, "'");
  return integer(key, 0);
}

int64_t ConfigReader::integer(const char* key, int64_t fallback) {
  if (!read(key)) return fallback;
  const nlohmann::json& v = json_->j[key];
  if (!v.is_number_integer()) fail_key(key, "must be an integer, got ", v.dump());
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    fail_key(key, "is too large: ", v.dump());
  return v.get<int64_t>();
}

int64_t ConfigReader::size(const char* key, int64_t limit) {
  if (!has(key)) fail(source_, ": missing required key '", key, "'");
  return size(key, 0, limit);
}

int64_t ConfigReader::size(const char* key, int64_t fallback, int64_t limit) {
  if (has(key) && !json_->j[key].is_number_integer())
    fail_key(key, "must be an integer in [1, ", limit, "], got ", json_->j[key].dump());
  const int64_t v = integer(key, fallback);
  if (v < 1 || v > limit) fail_key(key, "must be in [1, ", limit, "], got ", v);
  return v;
}

double ConfigReader::number(const char* key, double fallback) {
  if (!read(key)) return fallback;
  const nlohmann::json& v = json_->j[key];
  if (!v.is_number()) fail_key(key, "must be a number, got ", v.dump());
  return v.get<double>();
}

bool ConfigReader::boolean(const char* key, bool fallback) {
  if (!read(key)) return fallback;
  const nlohmann::json& v = json_->j[key];
  if (!v.is_boolean()) fail_key(key, "must be true or false, got ", v.dump());
  return v.get<bool>();
}

std::string ConfigReader::string(const char* key, const std::string& fallback) {
  if (!read(key)) return fallback;
  const nlohmann::json& v = json_->j[key];
  if (!v.is_string()) fail_key(key, "must be a string, got ", v.dump());
  return v.get<std::string>();
}

std::vector<int64_t> ConfigReader::integers(const char* key, std::vector<int64_t> fallback,
                                            bool scalar_ok) {
  if (!read(key)) return fallback;
  const nlohmann::json& v = json_->j[key];
  if (scalar_ok && v.is_number_integer()) return {integer(key, 0)};
  const char* what = scalar_ok ? "must be an integer or a list of integers, got "
                               : "must be a list of integers, got ";
  if (!v.is_array()) fail_key(key, what, v.dump());
  std::vector<int64_t> out;
  for (const nlohmann::json& e : v) {
    if (!e.is_number_integer()) fail_key(key, what, v.dump());
    out.push_back(e.get<int64_t>());
  }
  return out;
}

std::vector<std::string> ConfigReader::strings(const char* key) {
  if (!read(key)) return {};
  const nlohmann::json& v = json_->j[key];
  std::vector<std::string> out;
  if (v.is_array())
    for (const nlohmann::json& e : v)
      if (e.is_string()) out.push_back(e.get<std::string>());
  if (!v.is_array() || out.size() != v.size())
    fail_key(key, "must be a list of strings, got ", v.dump());
  return out;
}

void ConfigReader::require_value(const char* key, const char* value) {
  if (!read(key)) return;
  const nlohmann::json want = nlohmann::json::parse(value);
  if (json_->j[key] != want)
    fail_key(key, "must be ", want.dump(), " (attnkit implements no other), got ", json_->j[key].dump());
}

void ConfigReader::model_type(std::initializer_list<const char*> types, bool required) {
  if (!read("model_type")) {
    if (required) fail(source_, ": missing required key 'model_type'");
    return;
  }
  const std::string t = string("model_type", "");
  std::string allowed;
  for (const char* name : types) {
    if (t == name) return;
    allowed += std::string(allowed.empty() ? "\"" : ", \"") + name + "\"";
  }
  fail_key("model_type", "must be ", allowed, ", got \"", t, "\"");
}

ConfigLabels ConfigReader::labels(int64_t default_num_labels) {
  mark("id2label");
  mark("label2id");
  ConfigLabels out;
  out.num_labels = integer("num_labels", default_num_labels);
  if (has("id2label")) {
    const nlohmann::json& m = json_->j["id2label"];
    if (!m.is_object()) fail_key("id2label", "must be an object {\"0\": name, ...}, got ", m.dump());
    const int64_t n = int64_t(m.size());
    if (n > kMaxConfigLabels) fail_key("id2label", "has more than ", kMaxConfigLabels, " entries");
    out.names.assign(size_t(n), "");
    std::vector<bool> seen(size_t(n), false);
    for (const auto& [k, v] : m.items()) {
      int64_t id = -1;
      if (!k.empty() && k.size() < 10 && std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; }))
        id = std::stoll(k);
      if (id < 0 || id >= n || !v.is_string() || seen[size_t(id)])
        fail_key("id2label", "must map \"0\"..\"", n - 1, "\" to strings; bad entry \"", k, "\"");
      seen[size_t(id)] = true;
      out.names[size_t(id)] = v.get<std::string>();
    }
    if (has("num_labels") && out.num_labels != n)
      fail_key("num_labels", "(", out.num_labels, ") disagrees with id2label (", n, " entries)");
    out.num_labels = n;
  }
  if (has("label2id")) {  // HF writes both; each entry must name its id2label entry
    const nlohmann::json& m = json_->j["label2id"];
    if (!m.is_object()) fail_key("label2id", "must be an object {name: id, ...}, got ", m.dump());
    for (const auto& [name, id] : m.items())
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() >= int64_t(out.names.size()) || out.names[size_t(id.get<int64_t>())] != name)
        fail_key("label2id", "must be the inverse of id2label; bad entry \"", name, "\"");
  }
  if (out.num_labels < 1 || out.num_labels > kMaxConfigLabels)
    fail_key("num_labels", "must be in [1, ", kMaxConfigLabels, "], got ", out.num_labels);
  return out;
}

void ConfigReader::finish() const {
  for (const auto& [key, value] : json_->j.items()) {
    if (std::find(read_.begin(), read_.end(), key) != read_.end()) continue;
    if (std::find_if(std::begin(kIgnoredConfigKeys), std::end(kIgnoredConfigKeys),
                     [&](const char* k) { return key == k; }) != std::end(kIgnoredConfigKeys))
      continue;
    fail(source_, ": unknown key '", key, "' (keys attnkit does not read are refused, so a misspelt "
         "key cannot silently take its default)");
  }
}

ConfigWriter::ConfigWriter() : json_(std::make_unique<Json>()) {}
ConfigWriter::~ConfigWriter() = default;

ConfigWriter& ConfigWriter::set(const char* key, int64_t v) {
  json_->j[key] = v;
  return *this;
}
ConfigWriter& ConfigWriter::set(const char* key, double v) {
  json_->j[key] = v;
  return *this;
}
ConfigWriter& ConfigWriter::set(const char* key, bool v) {
  json_->j[key] = v;
  return *this;
}
ConfigWriter& ConfigWriter::set(const char* key, const char* v) {
  json_->j[key] = v;
  return *this;
}
ConfigWriter& ConfigWriter::set(const char* key, std::span<const int64_t> v) {
  json_->j[key] = std::vector<int64_t>(v.begin(), v.end());
  return *this;
}
ConfigWriter& ConfigWriter::set(const char* key, std::span<const std::string> v) {
  json_->j[key] = std::vector<std::string>(v.begin(), v.end());
  return *this;
}

ConfigWriter& ConfigWriter::architecture(const std::string& architecture, const char* model_type) {
  const std::string names[] = {architecture};
  return set("architectures", std::span<const std::string>(names)).set("model_type", model_type);
}

ConfigWriter& ConfigWriter::labels(int64_t num_labels, const std::vector<std::string>& names) {
  json_->j["num_labels"] = num_labels;
  if (names.empty()) return *this;
  nlohmann::ordered_json id2label = nlohmann::ordered_json::object(),
                         label2id = nlohmann::ordered_json::object();
  for (size_t i = 0; i < names.size(); ++i) {
    id2label[std::to_string(i)] = names[i];
    label2id[names[i]] = i;
  }
  json_->j["id2label"] = id2label;
  json_->j["label2id"] = label2id;
  return *this;
}

std::string ConfigWriter::text() const { return json_->j.dump(2) + "\n"; }

}  // namespace attnkit
