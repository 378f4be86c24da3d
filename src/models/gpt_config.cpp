// GPT config.json ↔ GptConfig (Hugging Face LlamaConfig keys + attnkit keys).
#include "attnkit/models/gpt_config.hpp"

#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

using nlohmann::json;

int64_t get_int(const json& j, const char* key, int64_t fallback, bool required) {
  if (!j.contains(key) || j[key].is_null()) {
    check(!required, "config: missing required key '", key, "'");
    return fallback;
  }
  check(j[key].is_number_integer(), "config: '", key, "' must be an integer");
  return j[key].get<int64_t>();
}

double get_number(const json& j, const char* key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  check(j[key].is_number(), "config: '", key, "' must be a number");
  return j[key].get<double>();
}

bool get_bool(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  check(j[key].is_boolean(), "config: '", key, "' must be true or false");
  return j[key].get<bool>();
}

template <class E, size_t N>
E get_enum(const json& j, const char* key, E fallback, const std::pair<const char*, E> (&names)[N]) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  check(j[key].is_string(), "config: '", key, "' must be a string");
  const std::string v = j[key].get<std::string>();
  for (const auto& [name, e] : names)
    if (v == name) return e;
  std::string allowed;
  for (const auto& [name, e] : names) allowed += std::string(allowed.empty() ? "" : ", ") + name;
  fail("config: '", key, "' must be one of ", allowed, "; got '", v, "'");
}

constexpr std::pair<const char*, GateMode> kGates[] = {
    {"none", GateMode::kNone}, {"headwise", GateMode::kHeadwise}, {"elementwise", GateMode::kElementwise}};
constexpr std::pair<const char*, GateSource> kSources[] = {{"input", GateSource::kInput},
                                                           {"query", GateSource::kQuery}};
constexpr std::pair<const char*, SinkMode> kSinks[] = {
    {"none", SinkMode::kNone}, {"learned", SinkMode::kLearned}, {"off_by_one", SinkMode::kOffByOne}};

template <class E, size_t N>
const char* name_of(E e, const std::pair<const char*, E> (&names)[N]) {
  for (const auto& [name, v] : names)
    if (v == e) return name;
  return "?";
}

}  // namespace

void validate(const GptConfig& c) {
  check(c.vocab_size >= 1, "config: vocab_size must be >= 1, got ", c.vocab_size);
  check(c.hidden_size >= 1, "config: hidden_size must be >= 1, got ", c.hidden_size);
  check(c.intermediate_size >= 1, "config: intermediate_size must be >= 1");
  check(c.num_hidden_layers >= 1, "config: num_hidden_layers must be >= 1");
  check(c.num_attention_heads >= 1, "config: num_attention_heads must be >= 1");
  check(c.num_key_value_heads >= 1 && c.num_attention_heads % c.num_key_value_heads == 0,
        "config: num_attention_heads (", c.num_attention_heads,
        ") must be a multiple of num_key_value_heads (", c.num_key_value_heads, ")");
  check(c.head_dim >= 2 && c.head_dim % 2 == 0, "config: head_dim must be even and >= 2 (RoPE), got ",
        c.head_dim);
  check(c.max_position_embeddings >= 1, "config: max_position_embeddings must be >= 1");
  check(c.rms_norm_eps > 0, "config: rms_norm_eps must be > 0");
  check(c.rope_theta > 0, "config: rope_theta must be > 0");
  check(c.window >= -1, "config: attnkit_window must be >= -1, got ", c.window);
  check(c.registers >= 0 && c.registers < c.max_position_embeddings && c.registers < c.vocab_size,
        "config: attnkit_registers must be in [0, min(max_position_embeddings, vocab_size)), got ",
        c.registers);
}

std::vector<int32_t> gpt_register_ids(const GptConfig& c) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < c.registers; ++i) ids.push_back(int32_t(c.vocab_size - c.registers + i));
  return ids;
}

GptConfig parse_gpt_config(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("config: not valid JSON (", e.what(), ")");
  }
  check(j.is_object(), "config: top level must be a JSON object");
  if (j.contains("hidden_act"))
    check(j["hidden_act"] == "silu", "config: hidden_act must be \"silu\" (Llama's SwiGLU MLP), got ",
          j["hidden_act"].dump());
  GptConfig c;
  c.vocab_size = get_int(j, "vocab_size", 0, true);
  c.hidden_size = get_int(j, "hidden_size", 0, true);
  c.intermediate_size = get_int(j, "intermediate_size", 0, true);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", 0, true);
  c.num_attention_heads = get_int(j, "num_attention_heads", 0, true);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", c.num_attention_heads, false);
  check(c.num_attention_heads > 0, "config: num_attention_heads must be >= 1");
  c.head_dim = get_int(j, "head_dim", c.hidden_size / c.num_attention_heads, false);
  if (!j.contains("head_dim"))
    check(c.hidden_size % c.num_attention_heads == 0, "config: hidden_size (", c.hidden_size,
          ") must be a multiple of num_attention_heads (", c.num_attention_heads,
          ") when head_dim is not given");
  c.max_position_embeddings = get_int(j, "max_position_embeddings", 2048, false);
  c.rms_norm_eps = get_number(j, "rms_norm_eps", 1e-6);
  c.rope_theta = get_number(j, "rope_theta", 10000.0);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false);
  c.attention_bias = get_bool(j, "attention_bias", false);
  c.gate = get_enum(j, "attnkit_gate", GateMode::kNone, kGates);
  c.gate_source = get_enum(j, "attnkit_gate_source", GateSource::kInput, kSources);
  c.sink = get_enum(j, "attnkit_sink", SinkMode::kNone, kSinks);
  c.window = get_int(j, "attnkit_window", -1, false);
  c.registers = get_int(j, "attnkit_registers", 0, false);
  validate(c);
  return c;
}

std::string gpt_config_to_json(const GptConfig& c) {
  const json j = {{"architectures", {"LlamaForCausalLM"}},
                  {"model_type", "llama"},
                  {"vocab_size", c.vocab_size},
                  {"hidden_size", c.hidden_size},
                  {"intermediate_size", c.intermediate_size},
                  {"num_hidden_layers", c.num_hidden_layers},
                  {"num_attention_heads", c.num_attention_heads},
                  {"num_key_value_heads", c.num_key_value_heads},
                  {"head_dim", c.head_dim},
                  {"max_position_embeddings", c.max_position_embeddings},
                  {"rms_norm_eps", c.rms_norm_eps},
                  {"rope_theta", c.rope_theta},
                  {"tie_word_embeddings", c.tie_word_embeddings},
                  {"attention_bias", c.attention_bias},
                  {"hidden_act", "silu"},
                  {"torch_dtype", "float32"},
                  {"attnkit_gate", name_of(c.gate, kGates)},
                  {"attnkit_gate_source", name_of(c.gate_source, kSources)},
                  {"attnkit_sink", name_of(c.sink, kSinks)},
                  {"attnkit_window", c.window},
                  {"attnkit_registers", c.registers}};
  return j.dump(2) + "\n";
}

int64_t gpt_parameter_count(const GptConfig& c) {
  const int64_t C = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads,
                D = c.head_dim, F = c.intermediate_size, V = c.vocab_size;
  int64_t attn = C * (H + 2 * Hkv) * D + H * D * C;
  if (c.attention_bias) attn += (H + 2 * Hkv) * D;
  if (c.gate == GateMode::kHeadwise) attn += c.gate_source == GateSource::kInput ? H * C + H : H * D + H;
  if (c.gate == GateMode::kElementwise)
    attn += c.gate_source == GateSource::kInput ? H * D * C + H * D : H * D * D + H * D;
  if (c.sink == SinkMode::kLearned) attn += H;
  const int64_t layer = attn + 3 * C * F + 2 * C;
  return V * C + c.num_hidden_layers * layer + C + (c.tie_word_embeddings ? 0 : V * C);
}

}  // namespace attnkit
