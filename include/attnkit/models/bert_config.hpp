#pragma once
// BERT configuration: Hugging Face `BertConfig` keys, so a Hugging Face BERT directory's
// config.json loads as is and ours stays readable by HF tools.
//
//   HF keys: architectures[0] (which heads: BertForPreTraining, BertForMaskedLM,
//            BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering),
//            vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
//            hidden_act ("gelu" exact, "gelu_new" / "gelu_pytorch_tanh" tanh approximation),
//            hidden_dropout_prob, attention_probs_dropout_prob, max_position_embeddings,
//            type_vocab_size, layer_norm_eps, pad_token_id, num_labels / id2label / label2id;
//            accepted with one value only: position_embedding_type ("absolute"), is_decoder and
//            add_cross_attention (false), classifier_dropout (null); initializer_range is unused.
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/nn/activation.hpp"  // GeluApproximation

namespace attnkit {

// The Hugging Face class a model directory holds; it decides which head tensors exist.
enum class BertArchitecture {
  kPreTraining,             // pooler + cls.predictions (MLM) + cls.seq_relationship (NSP)
  kMaskedLM,                // cls.predictions only (no pooler, as HF)
  kSequenceClassification,  // pooler + classifier [num_labels, C] on the pooled [CLS]
  kTokenClassification,     // classifier [num_labels, C] on every token (no pooler)
  kQuestionAnswering,       // qa_outputs [2, C]: span start/end logits per token (no pooler)
};

struct BertConfig {
  BertArchitecture architecture = BertArchitecture::kPreTraining;
  int64_t vocab_size = 261;               // V (byte tokenizer)
  int64_t hidden_size = 128;              // C
  int64_t num_hidden_layers = 2;          // L
  int64_t num_attention_heads = 4;        // H (head_dim D = C / H)
  int64_t intermediate_size = 512;        // F
  int64_t max_position_embeddings = 128;  // P, learned absolute positions
  int64_t type_vocab_size = 2;            // segment ids
  double layer_norm_eps = 1e-12;
  GeluApproximation hidden_act = GeluApproximation::kNone;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t pad_token_id = 257;             // metadata only (padding never reaches a loss)
  int64_t num_labels = 2;                 // K for the classification heads
  std::vector<std::string> labels;        // id2label names (empty or num_labels entries)

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  bool has_pooler() const;
  bool has_mlm() const;
};

// Hugging Face class name of an architecture ("BertForPreTraining", ...).
const char* bert_architecture_name(BertArchitecture a);
// Parses config.json text; throws attnkit::Error naming the key for missing/invalid values.
// Rules of models/config_reader.hpp (unknown keys refused, sizes bounded, labels); `source`
// names the file in errors.
BertConfig parse_bert_config(const std::string& json_text, const std::string& source = "config.json");
// Serialises to config.json text (HF keys, model_type "bert").
std::string bert_config_to_json(const BertConfig& config);
// Checks ranges and divisibility; throws attnkit::Error naming the key.
void validate(const BertConfig& config);

}  // namespace attnkit
