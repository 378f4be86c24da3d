// BERT model: parameter layout with Hugging Face names, initialisation, load/save, accessors.
// The encoder is in bert_encoder.cpp, the heads in bert_heads.cpp.
#include "attnkit/models/bert.hpp"

#include <algorithm>
#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/models/model_dir.hpp"
#include "bert_activations.hpp"

namespace attnkit {
namespace {
// Hugging Face BertLayer: post-LN.
constexpr EncoderLayerNames kLayerNames = {"attention.self", "attention.output.LayerNorm",
                                           "output.LayerNorm", false};
}  // namespace

BertModel::BertModel(const BertConfig& config) : ParameterModel("BertModel"), config_(config) {
  validate(config_);
  build_layout();
}
BertModel::~BertModel() = default;
BertModel::BertModel(BertModel&&) noexcept = default;
BertModel& BertModel::operator=(BertModel&&) noexcept = default;

std::string BertModel::layer_prefix(int64_t l) const {
  return "bert.encoder.layer." + std::to_string(l) + ".";
}

void BertModel::build_layout() {
  const auto& c = config_;
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  ParameterStore& s = store_;
  s.add("bert.embeddings.word_embeddings.weight", {V, C});
  s.add("bert.embeddings.position_embeddings.weight", {c.max_position_embeddings, C});
  s.add("bert.embeddings.token_type_embeddings.weight", {c.type_vocab_size, C});
  s.add_norm("bert.embeddings.LayerNorm", C);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    add_encoder_layer(s, layer_prefix(l), kLayerNames, C, F, true);
  if (c.has_pooler()) s.add_linear("bert.pooler.dense", C, C);
  if (c.has_mlm()) {
    s.add_linear("cls.predictions.transform.dense", C, C);
    s.add_norm("cls.predictions.transform.LayerNorm", C);
    s.add("cls.predictions.bias", {V});
  }
  switch (c.architecture) {
    case BertArchitecture::kPreTraining: s.add_linear("cls.seq_relationship", 2, C); break;
    case BertArchitecture::kSequenceClassification:
    case BertArchitecture::kTokenClassification: s.add_linear("classifier", c.num_labels, C); break;
    case BertArchitecture::kQuestionAnswering: s.add_linear("qa_outputs", 2, C); break;
    case BertArchitecture::kMaskedLM: break;
  }
  store_.allocate();
  resolve_ids();
}

void BertModel::resolve_ids() {
  const auto& s = store_;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l)
    layers_.push_back(encoder_layer_ids(s, layer_prefix(l), kLayerNames, config_.hidden_size));
  word_ = s.id("bert.embeddings.word_embeddings.weight");
  position_ = s.id("bert.embeddings.position_embeddings.weight");
  token_type_ = s.id("bert.embeddings.token_type_embeddings.weight");
  emb_norm_ = s.layer("bert.embeddings.LayerNorm");
  pooler_ = s.find_layer("bert.pooler.dense");
  mlm_dense_ = s.find_layer("cls.predictions.transform.dense");
  mlm_norm_ = s.find_layer("cls.predictions.transform.LayerNorm");
  mlm_bias_ = s.find("cls.predictions.bias");
  for (const char* head : {"cls.seq_relationship", "classifier", "qa_outputs"})
    if (s.has(std::string(head) + ".weight")) head_ = s.layer(head);
}

AttentionBlockOptions BertModel::block_options(int64_t l) const {
  return encoder_block_options(config_.num_attention_heads, config_.head_dim(), true,
                               training_ ? float(config_.attention_probs_dropout_prob) : 0.0f,
                               seed_, l);
}

float BertModel::dropout_p() const { return training_ ? float(config_.hidden_dropout_prob) : 0.0f; }

void BertModel::set_training(bool training, uint64_t seed) {
  training_ = training;
  seed_ = seed;
}

void BertModel::init_random(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (const auto& p : store_.info()) {
    float* x = store_.parameters().data() + p.offset;
    const bool norm = p.name.find("LayerNorm.weight") != std::string::npos;
    const bool vector = p.shape.size() == 1;
    for (int64_t i = 0; i < p.numel; ++i) x[i] = norm ? 1.0f : vector ? 0.0f : normal(rng);
  }
}

int64_t BertModel::copy_matching(const BertModel& other) {
  int64_t n = 0;
  for (const auto& p : store_.info())
    if (other.store_.has(p.name))
      if (const ParameterInfo& q = other.store_.info(p.name); p.shape == q.shape) {
        std::copy_n(other.store_.parameters().data() + q.offset, q.numel, store_.parameters().data() + p.offset);
        ++n;
      }
  return n;
}

void BertModel::save(const std::string& dir) const {
  store_.save(dir, bert_config_to_json(config_));
}

BertModel BertModel::load(const std::string& dir) {
  return load_model_dir<BertModel>(dir, parse_bert_config, "BertModel.load");
}

ConstView2 BertModel::sequence_output() const {
  check(acts_ && acts_->has_forward, "BertModel.sequence_output: call forward() first");
  return acts_->resid.back().view();
}
ConstView2 BertModel::pooled_output() const {
  check(acts_ && acts_->has_forward, "BertModel.pooled_output: call forward() first");
  check(config_.has_pooler(), "BertModel.pooled_output: ", bert_architecture_name(config_.architecture),
        " has no pooler");
  return acts_->pooled.view();
}
ConstView2 BertModel::task_logits() const {
  check(acts_ && acts_->has_forward, "BertModel.task_logits: call forward() first");
  check(config_.architecture != BertArchitecture::kMaskedLM,
        "BertModel.task_logits: BertForMaskedLM has no task head (use mlm_logits)");
  return acts_->logits.view();
}

int64_t bert_parameter_count(const BertConfig& config) {
  const BertModel m(config);  // the layout is the definition
  return int64_t(m.parameters().size());
}

}  // namespace attnkit
