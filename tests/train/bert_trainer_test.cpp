// BERT trainer: a resumed run reproduces the uninterrupted losses bit for bit; the three batching
// strategies see the same examples over a bucketing pool; fine-tuning learns a separable task.
#include "attnkit/train/bert_trainer.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/io/tokenizer.hpp"

namespace attnkit {
namespace {

BertConfig tiny(BertArchitecture arch) {
  BertConfig c;
  c.architecture = arch;
  c.vocab_size = ByteTokenizer::vocab_size(), c.hidden_size = 16, c.num_hidden_layers = 1;
  c.num_attention_heads = 2, c.intermediate_size = 32, c.max_position_embeddings = 32;
  c.num_labels = 2;
  return c;
}

std::vector<std::string> docs(int n) {
  std::mt19937 rng(3);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string s(4 + rng() % 24, ' ');
    for (auto& ch : s) ch = char('a' + rng() % 6);
    out.push_back(s);
  }
  return out;
}

std::string temp_dir(const char* name) {
  const auto p = std::filesystem::temp_directory_path() / ("attnkit_bert_" + std::string(name) + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

TEST(BertTrainer, ResumeReproducesTheUninterruptedLosses) {
  const ThreadCountScope one_thread(1);  // tiny shapes: thread hand-offs would dominate
  const BertDocuments d = split_documents(docs(60), {}, 0.2, 1);
  BertTrainOptions o{.objective = BertObjective::kMlmNsp, .batching = Batching::kBucket, .steps = 4,
                     .batch = 4, .max_len = 32, .bucket_pool = 2, .eval_every = 0, .eval_examples = 8,
                     .checkpoint_every = 2};
  o.progress = false;
  o.out_dir = temp_dir("full");
  BertModel a(tiny(BertArchitecture::kPreTraining));
  a.init_random(1);
  BertTrainer ta(a, d, o);
  std::vector<float> full;
  for (int64_t s = 0; s < 4; ++s) full.push_back(ta.step(s).loss);

  o.out_dir = temp_dir("resumed");
  o.steps = 2;
  BertModel b(tiny(BertArchitecture::kPreTraining));
  b.init_random(1);
  BertTrainer(b, d, o).run();
  o.steps = 4;
  BertModel c(tiny(BertArchitecture::kPreTraining));
  BertTrainer tc(c, d, o);
  ASSERT_EQ(tc.resume(), 2);
  EXPECT_EQ(tc.step(2).loss, full[2]);
  EXPECT_EQ(tc.step(3).loss, full[3]);
  std::filesystem::remove_all(o.out_dir);
  std::filesystem::remove_all(temp_dir("full"));
}

TEST(BertTrainer, StrategiesSeeTheSameExamplesPerPool) {
  const BertDocuments d = split_documents(docs(60), {}, 0.2, 1);
  BertModel m(tiny(BertArchitecture::kMaskedLM));
  int64_t real[3] = {0, 0, 0}, computed[3] = {0, 0, 0};
  const Batching kinds[3] = {Batching::kPad, Batching::kBucket, Batching::kPack};
  for (int k = 0; k < 3; ++k) {
    BertTrainOptions o{.batching = kinds[k], .steps = 4, .batch = 4, .max_len = 32};
    o.bucket_pool = 4;
    o.out_dir = "unused";
    BertTrainer t(m, d, o);
    for (int64_t s = 0; s < 4; ++s) {
      const LaidOutBatch b = lay_out(t.step_examples(s), kinds[k], o.max_len);
      real[k] += b.real_tokens;
      computed[k] += b.computed_tokens();
    }
  }
  EXPECT_EQ(real[0], real[1]);
  EXPECT_EQ(real[0], real[2]);
  EXPECT_LE(computed[1], computed[0]);  // buckets never pad more than random batches of the pool
  EXPECT_LT(computed[2], computed[0]);
}

TEST(BertTrainer, FineTuningLearnsASeparableTask) {
  const ThreadCountScope one_thread(1);  // tiny shapes: thread hand-offs would dominate
  std::vector<std::string> text;
  std::vector<int32_t> labels;
  std::mt19937 rng(5);
  for (int i = 0; i < 80; ++i) {  // class 0 uses letters a-c, class 1 letters x-z
    const int32_t y = i % 2;
    std::string s(6 + rng() % 10, ' ');
    for (auto& ch : s) ch = char((y ? 'x' : 'a') + rng() % 3);
    text.push_back(s);
    labels.push_back(y);
  }
  const BertDocuments docs = split_documents(text, labels, 0.25, 2);
  BertTaskData d;
  for (size_t i = 0; i < docs.train.size(); ++i) d.train.push_back(document_example(docs.train[i], docs.train_labels[i], 32));
  for (size_t i = 0; i < docs.validation.size(); ++i)
    d.validation.push_back(document_example(docs.validation[i], docs.validation_labels[i], 32));
  BertConfig cfg = tiny(BertArchitecture::kSequenceClassification);
  cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0;
  BertModel m(cfg);
  m.init_random(2);
  BertTrainOptions o{.objective = BertObjective::kClassify, .steps = 80, .batch = 8, .max_len = 32,
                     .eval_every = 0, .checkpoint_every = 0};
  o.progress = false;
  o.schedule = {.max_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 5, .total_steps = 80};
  o.out_dir = temp_dir("finetune");
  BertTrainer t(m, d, o);
  const BertEvalResult before = t.evaluate(100);
  for (int64_t s = 0; s < o.steps; ++s) t.step(s);
  const BertEvalResult after = t.evaluate(100);
  EXPECT_LT(after.loss, before.loss) << before.accuracy << " " << after.accuracy;
  EXPECT_GE(after.accuracy, 0.9) << before.loss << " -> " << after.loss;
  EXPECT_GT(after.accuracy, majority_baseline(d));
  EXPECT_THROW(BertTrainer(m, split_documents(text, {}, 0.25, 2), o), Error);  // documents, not a task
  o.objective = BertObjective::kSpan;
  EXPECT_THROW(BertTrainer(m, d, o), Error);  // a span task needs BertForQuestionAnswering
  std::filesystem::remove_all(o.out_dir);
}

TEST(BertTasks, AttributionTokensAndSpan) {
  const std::string quote = "Be yourself.\n\t\t-- Oscar Wilde \n";
  const auto r = find_attribution(quote);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(quote.substr(size_t(r->begin), size_t(r->end - r->begin)), "Oscar Wilde");
  EXPECT_FALSE(find_attribution("no attribution\nhere\n").has_value());
  EXPECT_FALSE(find_attribution("-- a one-liner").has_value());
  std::vector<std::string> entries(40, quote);
  entries[3] = std::string(300, 'x') + "\n-- Long Entry";  // kept: the last bytes fit
  const BertTaskData tok = attribution_task(entries, false, 24), span = attribution_task(entries, true, 24);
  ASSERT_EQ(tok.train.size() + tok.validation.size(), 40u);
  const BertExample& e = tok.train[0];
  ASSERT_EQ(e.token_labels.size(), e.tokens.size());
  EXPECT_EQ(e.token_labels.front(), -1);
  std::string name;
  for (size_t i = 0; i < e.tokens.size(); ++i)
    if (e.token_labels[i] == 1) name.push_back(char(e.tokens[i]));
  EXPECT_EQ(name, "Oscar Wilde");
  const BertExample& s = span.train[0];
  EXPECT_EQ(std::string(s.tokens.begin() + s.span_start, s.tokens.begin() + s.span_end + 1), "Oscar Wilde");
  bool found_long = false;
  for (const auto* set : {&span.train, &span.validation})
    for (const auto& x : *set)
      if (x.tokens[1] == 'x') {  // the long entry (its front was cut)
        found_long = true;
        EXPECT_EQ(std::string(x.tokens.begin() + x.span_start, x.tokens.begin() + x.span_end + 1), "Long Entry");
      }
  EXPECT_TRUE(found_long);
  // Laid out packed, the labels and spans follow their examples.
  const std::vector<BertExample> two{tok.train[0], tok.train[1]};
  const LaidOutBatch b = lay_out(two, Batching::kPad, 0);
  ASSERT_EQ(b.token_labels.size(), b.tokens.size());
  EXPECT_EQ(std::vector<int32_t>(b.token_labels.begin() + b.start[1], b.token_labels.begin() + b.start[1] + int64_t(two[1].tokens.size())),
            two[1].token_labels);
  const std::vector<BertExample> spans{span.train[0], span.train[1]};
  const LaidOutBatch c = lay_out(spans, Batching::kPack, 48);
  EXPECT_EQ(c.starts, (std::vector<int32_t>{spans[0].span_start, spans[1].span_start}));
  EXPECT_EQ(c.targets().end_positions.size(), 2u);
}

}  // namespace
}  // namespace attnkit
