// BERT config.json ↔ BertConfig (Hugging Face BertConfig keys).
#include "attnkit/models/bert_config.hpp"

#include "attnkit/core/error.hpp"
#include "attnkit/models/config_reader.hpp"
#include "encoder_config.hpp"

namespace attnkit {
namespace {

constexpr std::pair<const char*, BertArchitecture> kArchitectures[] = {
    {"BertForPreTraining", BertArchitecture::kPreTraining},
    {"BertForMaskedLM", BertArchitecture::kMaskedLM},
    {"BertForSequenceClassification", BertArchitecture::kSequenceClassification},
    {"BertForTokenClassification", BertArchitecture::kTokenClassification},
    {"BertForQuestionAnswering", BertArchitecture::kQuestionAnswering}};

}  // namespace

bool BertConfig::has_pooler() const {
  return architecture == BertArchitecture::kPreTraining ||
         architecture == BertArchitecture::kSequenceClassification;
}
bool BertConfig::has_mlm() const {
  return architecture == BertArchitecture::kPreTraining || architecture == BertArchitecture::kMaskedLM;
}

const char* bert_architecture_name(BertArchitecture a) {
  for (const auto& [name, v] : kArchitectures)
    if (v == a) return name;
  return "?";
}

void validate(const BertConfig& c) {
  check(c.vocab_size >= 1, "config: vocab_size must be >= 1, got ", c.vocab_size);
  check(c.hidden_size >= 1, "config: hidden_size must be >= 1, got ", c.hidden_size);
  check(c.num_hidden_layers >= 1, "config: num_hidden_layers must be >= 1, got ", c.num_hidden_layers);
  check(c.num_attention_heads >= 1 && c.hidden_size % c.num_attention_heads == 0,
        "config: num_attention_heads (", c.num_attention_heads, ") must divide hidden_size (",
        c.hidden_size, ")");
  check(c.intermediate_size >= 1, "config: intermediate_size must be >= 1, got ", c.intermediate_size);
  check(c.max_position_embeddings >= 1, "config: max_position_embeddings must be >= 1");
  check(c.type_vocab_size >= 1, "config: type_vocab_size must be >= 1");
  check(c.layer_norm_eps > 0, "config: layer_norm_eps must be > 0");
  check(c.hidden_dropout_prob >= 0 && c.hidden_dropout_prob < 1,
        "config: hidden_dropout_prob must be in [0, 1), got ", c.hidden_dropout_prob);
  check(c.attention_probs_dropout_prob >= 0 && c.attention_probs_dropout_prob < 1,
        "config: attention_probs_dropout_prob must be in [0, 1), got ", c.attention_probs_dropout_prob);
  check(c.num_labels >= 1, "config: num_labels must be >= 1, got ", c.num_labels);
  check(c.labels.empty() || int64_t(c.labels.size()) == c.num_labels,
        "config: id2label must have num_labels = ", c.num_labels, " entries, got ", c.labels.size());
}

BertConfig parse_bert_config(const std::string& text, const std::string& source) {
  ConfigReader r(text, source);
  r.model_type({"bert"}, false);
  BertConfig c;
  const std::vector<std::string> archs = r.strings("architectures");
  if (r.has("architectures")) {
    if (archs.empty()) r.fail_key("architectures", "must be a non-empty list of strings");
    bool found = false;
    for (const auto& [name, v] : kArchitectures)
      if (archs[0] == name) c.architecture = v, found = true;
    if (!found)
      r.fail_key("architectures", "[0] must be a BERT class (BertForPreTraining, BertForMaskedLM, "
                 "BertForSequenceClassification, BertForTokenClassification, "
                 "BertForQuestionAnswering); got '", archs[0], "'");
  }
  r.require_value("position_embedding_type", "\"absolute\"");
  r.require_value("is_decoder", "false");
  r.require_value("add_cross_attention", "false");
  r.require_value("classifier_dropout", "null");
  r.number("initializer_range", 0.02);  // init_random uses HF's 0.02 whatever it says
  c.vocab_size = r.size("vocab_size", kMaxConfigVocab);
  encoder_config::read(r, c, 0.1);
  c.max_position_embeddings = r.size("max_position_embeddings", 512, kMaxConfigPositions);
  c.type_vocab_size = r.size("type_vocab_size", 2, kMaxConfigVocab);
  c.pad_token_id = r.integer("pad_token_id", 0);
  const ConfigLabels labels = r.labels(c.num_labels);
  c.num_labels = labels.num_labels;
  c.labels = labels.names;
  r.finish();
  r.validate_with([&] { validate(c); });
  return c;
}

std::string bert_config_to_json(const BertConfig& c) {
  ConfigWriter w;
  w.architecture(bert_architecture_name(c.architecture), "bert").set("vocab_size", c.vocab_size);
  encoder_config::write(w, c)
      .set("max_position_embeddings", c.max_position_embeddings)
      .set("type_vocab_size", c.type_vocab_size)
      .set("layer_norm_eps", c.layer_norm_eps)
      .set("pad_token_id", c.pad_token_id)
      .set("position_embedding_type", "absolute")
      .set("torch_dtype", "float32")
      .labels(c.num_labels, c.labels);
  return w.text();
}

}  // namespace attnkit
