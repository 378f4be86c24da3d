#pragma once
// Named model shapes for training from scratch, shared by the CLI (--preset) and Python
// (attnkit.gpt_preset / attnkit.bert_preset): byte-level vocabulary (io/tokenizer.hpp).
#include <string>
#include <vector>

#include "attnkit/models/bert_config.hpp"
#include "attnkit/models/gpt_config.hpp"

namespace attnkit {

// GPT (Llama architecture) shapes: "tiny" (2 layers, width 64, context 128) and "small" (6
// layers, width 256, context 256, the benchmark shape). Throws attnkit::Error naming --preset.
GptConfig gpt_preset(const std::string& name);
// BERT encoder shapes, context 128: "tiny" (2 layers, width 64), "mini" (4, 128), "small" (6,
// 256); BertConfig's other defaults (the trainer picks the architecture). Throws
// attnkit::Error naming --preset.
BertConfig bert_preset(const std::string& name);
// The preset names, in order of size.
const std::vector<std::string>& gpt_preset_names();
const std::vector<std::string>& bert_preset_names();

}  // namespace attnkit
