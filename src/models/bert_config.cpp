// BERT config.json ↔ BertConfig (Hugging Face BertConfig keys).
#include "attnkit/models/bert_config.hpp"

#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

using nlohmann::json;

constexpr std::pair<const char*, BertArchitecture> kArchitectures[] = {
    {"BertForPreTraining", BertArchitecture::kPreTraining},
    {"BertForMaskedLM", BertArchitecture::kMaskedLM},
    {"BertForSequenceClassification", BertArchitecture::kSequenceClassification},
    {"BertForTokenClassification", BertArchitecture::kTokenClassification},
    {"BertForQuestionAnswering", BertArchitecture::kQuestionAnswering}};

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

BertConfig parse_bert_config(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("config: not valid JSON (", e.what(), ")");
  }
  check(j.is_object(), "config: top level must be a JSON object");
  BertConfig c;
  if (j.contains("architectures")) {
    check(j["architectures"].is_array() && !j["architectures"].empty() &&
              j["architectures"][0].is_string(),
          "config: 'architectures' must be a non-empty list of strings");
    const std::string a = j["architectures"][0].get<std::string>();
    bool found = false;
    for (const auto& [name, v] : kArchitectures)
      if (a == name) c.architecture = v, found = true;
    check(found, "config: architectures[0] must be a BERT class (BertForPreTraining, BertForMaskedLM, "
          "BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering); got '",
          a, "'");
  }
  if (j.contains("hidden_act")) {
    check(j["hidden_act"].is_string(), "config: 'hidden_act' must be a string");
    const std::string act = j["hidden_act"].get<std::string>();
    if (act == "gelu")
      c.hidden_act = GeluApproximation::kNone;
    else if (act == "gelu_new" || act == "gelu_pytorch_tanh")
      c.hidden_act = GeluApproximation::kTanh;
    else
      fail("config: hidden_act must be \"gelu\", \"gelu_new\" or \"gelu_pytorch_tanh\", got \"", act, "\"");
  }
  c.vocab_size = get_int(j, "vocab_size", 0, true);
  c.hidden_size = get_int(j, "hidden_size", 0, true);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", 0, true);
  c.num_attention_heads = get_int(j, "num_attention_heads", 0, true);
  c.intermediate_size = get_int(j, "intermediate_size", 0, true);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", 512, false);
  c.type_vocab_size = get_int(j, "type_vocab_size", 2, false);
  c.layer_norm_eps = get_number(j, "layer_norm_eps", 1e-12);
  c.hidden_dropout_prob = get_number(j, "hidden_dropout_prob", 0.1);
  c.attention_probs_dropout_prob = get_number(j, "attention_probs_dropout_prob", 0.1);
  c.pad_token_id = get_int(j, "pad_token_id", 0, false);
  if (j.contains("id2label")) {
    check(j["id2label"].is_object(), "config: 'id2label' must be an object");
    const int64_t n = int64_t(j["id2label"].size());
    c.labels.assign(size_t(n), "");
    for (const auto& [k, v] : j["id2label"].items()) {
      int64_t id = -1;
      try {
        id = std::stoll(k);
      } catch (const std::exception&) {
      }
      check(id >= 0 && id < n && v.is_string(), "config: id2label must map \"0\"..\"", n - 1,
            "\" to strings; bad entry \"", k, "\"");
      c.labels[size_t(id)] = v.get<std::string>();
    }
    c.num_labels = n;
  }
  c.num_labels = get_int(j, "num_labels", c.num_labels, false);
  if (int64_t(c.labels.size()) != c.num_labels) c.labels.clear();
  validate(c);
  return c;
}

std::string bert_config_to_json(const BertConfig& c) {
  json j = {{"architectures", {bert_architecture_name(c.architecture)}},
            {"model_type", "bert"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"num_hidden_layers", c.num_hidden_layers},
            {"num_attention_heads", c.num_attention_heads},
            {"intermediate_size", c.intermediate_size},
            {"hidden_act", c.hidden_act == GeluApproximation::kNone ? "gelu" : "gelu_new"},
            {"hidden_dropout_prob", c.hidden_dropout_prob},
            {"attention_probs_dropout_prob", c.attention_probs_dropout_prob},
            {"max_position_embeddings", c.max_position_embeddings},
            {"type_vocab_size", c.type_vocab_size},
            {"layer_norm_eps", c.layer_norm_eps},
            {"pad_token_id", c.pad_token_id},
            {"position_embedding_type", "absolute"},
            {"torch_dtype", "float32"},
            {"num_labels", c.num_labels}};
  if (!c.labels.empty()) {
    json id2label = json::object(), label2id = json::object();
    for (size_t i = 0; i < c.labels.size(); ++i) {
      id2label[std::to_string(i)] = c.labels[i];
      label2id[c.labels[i]] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
  }
  return j.dump(2) + "\n";
}

}  // namespace attnkit
