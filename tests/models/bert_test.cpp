// BERT model: every parameter's gradient against central finite differences of the loss on a
// tiny model, for each architecture (heads), with dropout on (fixed seed, so the masks stay put)
// and a packed batch that includes a padding segment; plus config round trip and bad input.
#include "attnkit/models/bert.hpp"

#include <gtest/gtest.h>

#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "nn/nn_testing.hpp"

namespace attnkit {
namespace {

BertConfig tiny(BertArchitecture arch) {
  BertConfig c;
  c.architecture = arch;
  c.vocab_size = 23, c.hidden_size = 8, c.num_hidden_layers = 2, c.num_attention_heads = 2;
  c.intermediate_size = 12, c.max_position_embeddings = 16, c.num_labels = 3;
  c.hidden_dropout_prob = 0.2, c.attention_probs_dropout_prob = 0.2;
  c.layer_norm_eps = 1e-5;
  return c;
}

struct Example {
  std::vector<int32_t> tokens, types, cu{0, 7, 10, 18}, seqs{0, 2};  // segment 1 is padding
  std::vector<int32_t> mlm, nsp{1, 0}, labels, starts{1, 2}, ends{3, 6};
};

Example example(const BertConfig& c) {
  Example e;
  std::mt19937 rng(7);
  for (int i = 0; i < 18; ++i) {
    e.tokens.push_back(int32_t(rng() % uint32_t(c.vocab_size)));
    e.types.push_back(i >= 4 && i < 7 ? 1 : 0);
    e.mlm.push_back(i % 4 == 1 && (i < 7 || i >= 10) ? int32_t(rng() % 20) : -1);
  }
  if (c.architecture == BertArchitecture::kSequenceClassification) e.labels = {2, 1};
  if (c.architecture == BertArchitecture::kTokenClassification)
    for (int i = 0; i < 18; ++i) e.labels.push_back(i >= 7 && i < 10 ? -1 : i % 3);
  return e;
}

BertTargets targets_of(const BertConfig& c, const Example& e) {
  BertTargets t;
  if (c.has_mlm()) t.mlm = e.mlm;
  if (c.architecture == BertArchitecture::kPreTraining) t.nsp = e.nsp;
  if (!e.labels.empty()) t.labels = e.labels;
  if (c.architecture == BertArchitecture::kQuestionAnswering) t.start_positions = e.starts, t.end_positions = e.ends;
  return t;
}

class BertGradient : public ::testing::TestWithParam<BertArchitecture> {};

TEST_P(BertGradient, EveryParameterMatchesFiniteDifferences) {
  const ThreadCountScope one_thread(1);  // tiny shapes: thread hand-offs would dominate
  const BertConfig cfg = tiny(GetParam());
  BertModel m(cfg);
  m.init_random(3);
  add_randn(m.parameters(), 11, 0.3f);  // non-trivial LayerNorm and bias values
  const Example e = example(cfg);
  const BertBatch batch{e.tokens, e.types, e.cu, e.seqs};
  const BertTargets tg = targets_of(cfg, e);
  m.set_training(true, 99);
  m.zero_grad();
  const BertLosses l = m.forward(batch, tg);
  ASSERT_GT(l.total, 0.0f);
  m.backward();
  const std::vector<float> grads(m.gradients().begin(), m.gradients().end());
  auto loss = [&] { return double(m.forward(batch, tg).total); };
  nn_testing::expect_sampled_gradients(loss, m.parameters(), m.parameter_info(), grads, 4);
}

INSTANTIATE_TEST_SUITE_P(
    Heads, BertGradient,
                         ::testing::Values(BertArchitecture::kPreTraining, BertArchitecture::kMaskedLM,
                                           BertArchitecture::kSequenceClassification,
                                           BertArchitecture::kTokenClassification,
                                           BertArchitecture::kQuestionAnswering),
    [](const auto& info) { return std::string(bert_architecture_name(info.param)); });

TEST(Bert, DropoutIsOffInEvalModeAndKeyedBySeedInTraining) {
  const ThreadCountScope one_thread(1);  // tiny shapes: thread hand-offs would dominate
  const BertConfig cfg = tiny(BertArchitecture::kPreTraining);
  BertModel m(cfg);
  m.init_random(1);
  const Example e = example(cfg);
  const BertBatch batch{e.tokens, e.types, e.cu, e.seqs};
  auto out = [&] {
    m.forward(batch);
    const ConstView2 s = m.sequence_output();
    return std::vector<float>(s.data, s.data + s.shape[0] * s.shape[1]);
  };
  const auto eval1 = out(), eval2 = out();
  EXPECT_EQ(eval1, eval2);
  m.set_training(true, 1);
  const auto a = out(), a2 = out();
  m.set_training(true, 2);
  const auto b = out();
  EXPECT_EQ(a, a2);
  EXPECT_NE(a, b);
  EXPECT_NE(a, eval1);
}

TEST(Bert, ConfigRoundTripAndValidation) {
  BertConfig c = tiny(BertArchitecture::kSequenceClassification);
  c.labels = {"a", "b", "c"};
  c.hidden_act = GeluApproximation::kTanh;
  const BertConfig d = parse_bert_config(bert_config_to_json(c));
  EXPECT_EQ(d.architecture, c.architecture);
  EXPECT_EQ(d.labels, c.labels);
  EXPECT_EQ(d.hidden_act, c.hidden_act);
  EXPECT_EQ(d.num_labels, 3);
  EXPECT_EQ(bert_parameter_count(d), int64_t(BertModel(c).parameters().size()));
  EXPECT_THROW(parse_bert_config(R"({"vocab_size": 5, "hidden_size": 6, "num_hidden_layers": 1,
      "num_attention_heads": 4, "intermediate_size": 3})"), Error);
  EXPECT_THROW(parse_bert_config(R"({"vocab_size": 5, "hidden_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 4, "intermediate_size": 3, "hidden_act": "relu"})"), Error);
  BertModel m(tiny(BertArchitecture::kMaskedLM));
  const std::vector<int32_t> tokens{1, 2, 3};
  BertTargets nsp_only;
  nsp_only.nsp = tokens;
  EXPECT_THROW(m.forward({tokens, {}, {}, {}}, nsp_only), Error);
  EXPECT_THROW(m.backward(), Error);
  EXPECT_THROW(m.pooled_output(), Error);
}

}  // namespace
}  // namespace attnkit
