#pragma once
// The GPT of the thread-emulated tensor-parallel tests: 2 layers, vocab 40, hidden 24, 4 heads of
// 6, MLP 30, attention biases on, with the given KV heads, gate and sink logits.
#include <cstdint>

#include "attnkit/models/gpt_config.hpp"

namespace attnkit::testing {

inline GptConfig tiny_tp_gpt(int64_t kv_heads, GateMode gate, SinkLogits sink) {
  GptConfig c;
  c.vocab_size = 40, c.hidden_size = 24, c.intermediate_size = 30, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = kv_heads, c.head_dim = 6;
  c.max_position_embeddings = 64, c.attention_bias = true, c.gate = gate, c.sink_logits = sink;
  return c;
}

}  // namespace attnkit::testing
