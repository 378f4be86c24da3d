// GPT config: a Hugging Face Llama config.json parses, ours round-trips, bad values are named.
#include "attnkit/models/gpt_config.hpp"

#include <gtest/gtest.h>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

// Keys as a Hugging Face LlamaConfig writes them (TinyLlama-like shape, shortened).
constexpr const char* kLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 32,
  "num_hidden_layers": 22, "num_key_value_heads": 4, "max_position_embeddings": 2048,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false,
  "vocab_size": 32000, "torch_dtype": "bfloat16", "bos_token_id": 1
})";

TEST(GptConfig, ParsesHuggingFaceLlamaConfig) {
  const GptConfig c = parse_gpt_config(kLlamaConfig);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 64);  // hidden_size / num_attention_heads
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.gate, GateMode::kNone);
  // TinyLlama-1.1B's published parameter count: 1,100,048,384.
  EXPECT_EQ(gpt_parameter_count(c), 1100048384);
}

TEST(GptConfig, RoundTripsAttnkitKeys) {
  GptConfig c;
  c.gate = GateMode::kElementwise;
  c.gate_source = GateSource::kQuery;
  c.sink_logits = SinkLogits::kLearned;
  c.window = 64;
  const GptConfig back = parse_gpt_config(gpt_config_to_json(c));
  EXPECT_EQ(back.gate, GateMode::kElementwise);
  EXPECT_EQ(back.gate_source, GateSource::kQuery);
  EXPECT_EQ(back.sink_logits, SinkLogits::kLearned);
  EXPECT_EQ(back.window, 64);
  EXPECT_EQ(back.num_key_value_heads, c.num_key_value_heads);
  EXPECT_EQ(back.head_dim, c.head_dim);
}

TEST(GptConfig, BadValuesNameTheKey) {
  auto message = [](const std::string& text) {
    try {
      parse_gpt_config(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string base = R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1)";
  EXPECT_NE(message("{" + base + R"(, "num_attention_heads": 4, "num_key_value_heads": 3})").find("num_key_value_heads"), std::string::npos);
  EXPECT_NE(message("{" + base + R"(, "num_attention_heads": 3})").find("hidden_size"), std::string::npos);
  EXPECT_NE(message(R"({"hidden_size": 8})").find("vocab_size"), std::string::npos);
  EXPECT_NE(message("{" + base + R"(, "num_attention_heads": 2, "hidden_act": "gelu"})").find("hidden_act"), std::string::npos);
  EXPECT_NE(message("{" + base + R"(, "num_attention_heads": 2, "attnkit_gate": "sometimes"})").find("attnkit_gate"), std::string::npos);
  EXPECT_NE(message("[1, 2]").find("object"), std::string::npos);
  EXPECT_NE(message("{nope").find("JSON"), std::string::npos);
  // Values the model holds in narrower types: a window of 2^32 became window 0 as an int, an
  // epsilon of 1e300 became inf as a float32 (refused only at the first forward).
  const std::string heads = base + R"(, "num_attention_heads": 2)";
  EXPECT_NE(message("{" + heads + R"(, "attnkit_window": 4294967296})").find("attnkit_window must be in [-1, 2147483647]"),
            std::string::npos);
  EXPECT_NE(message("{" + heads + R"(, "rms_norm_eps": 1e300})").find("rms_norm_eps must be > 0 and finite"),
            std::string::npos);
  EXPECT_NE(message("{" + heads + R"(, "rope_theta": 1e39})").find("rope_theta must be > 0 and finite"),
            std::string::npos);
  EXPECT_NE(message("{" + heads + R"(, "rope_theta": 1e-50})").find("rope_theta must be > 0"), std::string::npos);
  EXPECT_NE(message("{" + heads + R"(, "rms_norm_eps": 1e-50})").find("rms_norm_eps must be > 0"), std::string::npos);
  EXPECT_EQ(message("{" + heads + R"(, "attnkit_window": 2147483647})"), "no error");
}

}  // namespace
}  // namespace attnkit
