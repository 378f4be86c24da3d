// Named GPT and BERT shapes (see presets.hpp).
#include "attnkit/train/presets.hpp"

#include "attnkit/core/error.hpp"
#include "attnkit/io/tokenizer.hpp"

namespace attnkit {

const std::vector<std::string>& gpt_preset_names() {
  static const std::vector<std::string> names{"tiny", "small"};
  return names;
}

const std::vector<std::string>& bert_preset_names() {
  static const std::vector<std::string> names{"tiny", "mini", "small"};
  return names;
}

GptConfig gpt_preset(const std::string& name) {
  GptConfig c;
  c.vocab_size = ByteTokenizer::vocab_size();
  if (name == "tiny") {
    c.hidden_size = 64, c.intermediate_size = 172, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16;
    c.max_position_embeddings = 128;
  } else if (name == "small") {
    c.hidden_size = 256, c.intermediate_size = 688, c.num_hidden_layers = 6;
    c.num_attention_heads = 8, c.num_key_value_heads = 2, c.head_dim = 32;
    c.max_position_embeddings = 256;
  } else {
    fail("--preset: unknown preset '", name, "' (tiny, small)");
  }
  return c;
}

BertConfig bert_preset(const std::string& name) {
  BertConfig c;
  c.vocab_size = ByteTokenizer::vocab_size();
  c.pad_token_id = ByteTokenizer::kPad;
  c.max_position_embeddings = 128;
  if (name == "tiny") {
    c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.intermediate_size = 256;
  } else if (name == "mini") {
    c.hidden_size = 128, c.num_hidden_layers = 4, c.num_attention_heads = 4, c.intermediate_size = 512;
  } else if (name == "small") {
    c.hidden_size = 256, c.num_hidden_layers = 6, c.num_attention_heads = 8, c.intermediate_size = 1024;
  } else {
    fail("--preset: unknown preset '", name, "' (tiny, mini, small)");
  }
  return c;
}

}  // namespace attnkit
