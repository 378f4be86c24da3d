// GPT config.json ↔ GptConfig (Hugging Face LlamaConfig keys + attnkit keys).
#include "attnkit/models/gpt_config.hpp"

#include <cmath>
#include <limits>

#include "attnkit/core/error.hpp"
#include "attnkit/models/config_reader.hpp"

namespace attnkit {
namespace {

constexpr std::pair<const char*, GateMode> kGates[] = {
    {"none", GateMode::kNone}, {"headwise", GateMode::kHeadwise}, {"elementwise", GateMode::kElementwise}};
constexpr std::pair<const char*, GateSource> kSources[] = {{"input", GateSource::kInput},
                                                           {"query", GateSource::kQuery}};
constexpr std::pair<const char*, SinkLogits> kSinks[] = {
    {"none", SinkLogits::kNone}, {"learned", SinkLogits::kLearned}, {"off_by_one", SinkLogits::kOffByOne}};

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
  // Both are used as float32: they must be positive (not rounded to 0) and finite there.
  check(float(c.rms_norm_eps) > 0 && std::isfinite(float(c.rms_norm_eps)),
        "config: rms_norm_eps must be > 0 and finite in float32, got ", c.rms_norm_eps);
  check(float(c.rope_theta) > 0 && std::isfinite(float(c.rope_theta)),
        "config: rope_theta must be > 0 and finite in float32, got ", c.rope_theta);
  // The attention options hold window sizes as int.
  check(c.window >= -1 && c.window <= std::numeric_limits<int>::max(), "config: attnkit_window must be in [-1, ",
        std::numeric_limits<int>::max(), "], got ", c.window);
  check(c.registers >= 0 && c.registers < c.max_position_embeddings && c.registers < c.vocab_size,
        "config: attnkit_registers must be in [0, min(max_position_embeddings, vocab_size)), got ",
        c.registers);
}

std::vector<int32_t> gpt_register_ids(const GptConfig& c) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < c.registers; ++i) ids.push_back(int32_t(c.vocab_size - c.registers + i));
  return ids;
}

GptConfig parse_gpt_config(const std::string& text, const std::string& source) {
  ConfigReader r(text, source);
  r.model_type({"llama"}, false);
  r.strings("architectures");
  if (r.string("hidden_act", "silu") != "silu")
    r.fail_key("hidden_act", "must be \"silu\" (Llama's SwiGLU MLP), got \"", r.string("hidden_act", ""), "\"");
  r.require_value("rope_scaling", "null");
  r.require_value("mlp_bias", "false");
  r.require_value("attention_dropout", "0.0");
  r.number("initializer_range", 0.02);  // init_random uses GPT-2's 0.02 whatever it says
  r.integer("pad_token_id", 0);
  GptConfig c;
  c.vocab_size = r.size("vocab_size", kMaxConfigVocab);
  c.hidden_size = r.size("hidden_size", kMaxConfigWidth);
  c.intermediate_size = r.size("intermediate_size", kMaxConfigFfnWidth);
  c.num_hidden_layers = r.size("num_hidden_layers", kMaxConfigLayers);
  c.num_attention_heads = r.size("num_attention_heads", kMaxConfigHeads);
  c.num_key_value_heads = r.size("num_key_value_heads", c.num_attention_heads, kMaxConfigHeads);
  if (!r.has("head_dim") && c.hidden_size % c.num_attention_heads != 0)
    r.fail_key("hidden_size", "(", c.hidden_size, ") must be a multiple of num_attention_heads (",
               c.num_attention_heads, ") when head_dim is not given");
  c.head_dim = r.size("head_dim", c.hidden_size / c.num_attention_heads, kMaxConfigHeadDim);
  c.max_position_embeddings = r.size("max_position_embeddings", 2048, kMaxConfigPositions);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.rope_theta = r.number("rope_theta", 10000.0);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.attention_bias = r.boolean("attention_bias", false);
  c.gate = r.choice("attnkit_gate", GateMode::kNone, kGates);
  c.gate_source = r.choice("attnkit_gate_source", GateSource::kInput, kSources);
  c.sink_logits = r.choice("attnkit_sink", SinkLogits::kNone, kSinks);
  c.window = r.integer("attnkit_window", -1);
  c.registers = r.integer("attnkit_registers", 0);
  r.finish();
  r.validate_with([&] { validate(c); });
  return c;
}

std::string gpt_config_to_json(const GptConfig& c) {
  ConfigWriter w;
  w.architecture("LlamaForCausalLM", "llama")
      .set("vocab_size", c.vocab_size)
      .set("hidden_size", c.hidden_size)
      .set("intermediate_size", c.intermediate_size)
      .set("num_hidden_layers", c.num_hidden_layers)
      .set("num_attention_heads", c.num_attention_heads)
      .set("num_key_value_heads", c.num_key_value_heads)
      .set("head_dim", c.head_dim)
      .set("max_position_embeddings", c.max_position_embeddings)
      .set("rms_norm_eps", c.rms_norm_eps)
      .set("rope_theta", c.rope_theta)
      .set("tie_word_embeddings", c.tie_word_embeddings)
      .set("attention_bias", c.attention_bias)
      .set("hidden_act", "silu")
      .set("torch_dtype", "float32")
      .set("attnkit_gate", name_of(c.gate, kGates))
      .set("attnkit_gate_source", name_of(c.gate_source, kSources))
      .set("attnkit_sink", name_of(c.sink_logits, kSinks))
      .set("attnkit_window", c.window)
      .set("attnkit_registers", c.registers);
  return w.text();
}

int64_t gpt_parameter_count(const GptConfig& c) {
  const int64_t C = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads,
                D = c.head_dim, F = c.intermediate_size, V = c.vocab_size;
  int64_t attn = C * (H + 2 * Hkv) * D + H * D * C;
  if (c.attention_bias) attn += (H + 2 * Hkv) * D;
  if (c.gate == GateMode::kHeadwise) attn += c.gate_source == GateSource::kInput ? H * C + H : H * D + H;
  if (c.gate == GateMode::kElementwise)
    attn += c.gate_source == GateSource::kInput ? H * D * C + H * D : H * D * D + H * D;
  if (c.sink_logits == SinkLogits::kLearned) attn += H;
  const int64_t layer = attn + 3 * C * F + 2 * C;
  return V * C + c.num_hidden_layers * layer + C + (c.tie_word_embeddings ? 0 : V * C);
}

}  // namespace attnkit
