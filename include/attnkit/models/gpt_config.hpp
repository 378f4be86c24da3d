#pragma once
// GPT (decoder-only, Llama architecture) configuration: Hugging Face `LlamaConfig` keys, plus
// attnkit's own keys for what Llama lacks (output gate, attention sinks, sliding window), so a
// Hugging Face Llama directory's config.json loads as is and ours stays readable by HF tools
// (they ignore unknown keys). Also accepted: rope_scaling (null only), mlp_bias (false only),
// attention_dropout (0 only), initializer_range and pad_token_id (unused).
//
//   HF keys: vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
//            num_key_value_heads (default: num_attention_heads), head_dim (default:
//            hidden_size / num_attention_heads), max_position_embeddings, rms_norm_eps,
//            rope_theta, tie_word_embeddings, hidden_act ("silu" only), attention_bias.
//   attnkit: attnkit_gate ("none" | "headwise" | "elementwise"), attnkit_gate_source ("input" |
//            "query"), attnkit_sink ("none" | "learned" | "off_by_one"), attnkit_window (keys
//            before the diagonal each query sees; -1 = full causal), attnkit_registers (k >= 0
//            learned scratch tokens: the ids V-k..V-1, prepended to every training window, every
//            evaluation window and every stream; their positions are never scored).
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/nn/attention_block.hpp"  // GateMode, GateSource, SinkLogits

namespace attnkit {

struct GptConfig {
  int64_t vocab_size = 261;            // V (the byte tokenizer's 256 bytes + specials)
  int64_t hidden_size = 256;           // C
  int64_t intermediate_size = 683;     // F, SwiGLU width
  int64_t num_hidden_layers = 6;       // L
  int64_t num_attention_heads = 8;     // H
  int64_t num_key_value_heads = 2;     // Hkv
  int64_t head_dim = 32;               // D
  int64_t max_position_embeddings = 256;  // training context
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = true;
  bool attention_bias = false;
  GateMode gate = GateMode::kNone;
  GateSource gate_source = GateSource::kInput;
  SinkLogits sink_logits = SinkLogits::kNone;  // attnkit_sink: softmax sink logits
  int64_t window = -1;
  int64_t registers = 0;               // k register tokens (ids V-k..V-1) prepended to every input
};

// Parses config.json text (models/config_reader.hpp's rules: unknown keys refused, sizes
// bounded); throws attnkit::Error naming the key and `source` (the file) for bad values.
GptConfig parse_gpt_config(const std::string& json_text, const std::string& source = "config.json");
// Serialises to config.json text (HF keys + attnkit keys, model_type "llama").
std::string gpt_config_to_json(const GptConfig& config);
// Checks divisibility and ranges; throws attnkit::Error naming the key.
void validate(const GptConfig& config);
// The register token ids (V-k..V-1, in order); empty without registers.
std::vector<int32_t> gpt_register_ids(const GptConfig& config);
// Number of parameters of the model this config describes.
int64_t gpt_parameter_count(const GptConfig& config);

}  // namespace attnkit
