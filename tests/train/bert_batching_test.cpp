// Pad, bucket and pack layouts of the same examples give every real token the same encoder output
// (to float32 rounding: positions restart per segment and no token attends across a segment) and
// the same losses; padding counts and bucket order are as documented.
#include "attnkit/train/bert_batching.hpp"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/io/tokenizer.hpp"
#include "test_compare.hpp"

namespace attnkit {
namespace {

std::vector<BertExample> examples() {
  std::vector<std::vector<int32_t>> docs;
  std::mt19937 rng(4);
  for (int d = 0; d < 12; ++d) {
    std::vector<int32_t> doc(3 + rng() % 30);
    for (auto& t : doc) t = int32_t(rng() % 256);
    docs.push_back(doc);
  }
  std::vector<BertExample> out;
  for (uint64_t i = 0; i < 7; ++i)
    out.push_back(make_bert_example(docs, {}, {.max_len = 24, .nsp = true, .mlm = true,
                                               .masking = {.select = 0.3}, .seed = 3}, i));
  return out;
}

struct Outputs {
  std::vector<std::vector<float>> per_example;  // each example's rows of the sequence output
  BertLosses losses;
};

Outputs run(BertModel& m, const std::vector<BertExample>& ex, const LaidOutBatch& b) {
  Outputs r;
  r.losses = m.forward(b.batch(), b.targets());
  const ConstView2 s = m.sequence_output();
  for (size_t i = 0; i < ex.size(); ++i) {
    const float* p = s.ptr(b.start[i]);
    r.per_example.emplace_back(p, p + int64_t(ex[i].tokens.size()) * s.shape[1]);
  }
  return r;
}

// The same example's encoder rows from two layouts agree to float32 rounding. Not bitwise: a GEMM
// over more or fewer rows may block them differently (OpenBLAS's Zen kernels do), which changes
// the last bits; a layout bug (a token attending across segments, a position that does not
// restart) changes them by orders of magnitude more.
void expect_same_rows(const std::vector<float>& want, const std::vector<float>& got,
                      const char* layout, size_t example) {
  ASSERT_EQ(want.size(), got.size()) << layout << ", example " << example;
  double worst = 0;
  for (size_t j = 0; j < want.size(); ++j)
    worst = worse_error(worst, std::abs(double(got[j]) - want[j]) / (1.0 + std::abs(want[j])));
  // Seen: at most 7.5e-8 (one rounding step) with OpenBLAS's Zen kernels, 0 with its SkylakeX ones.
  EXPECT_LE(worst, 8 * double(FLT_EPSILON)) << layout << ", example " << example;
}

TEST(BertBatching, PadBucketAndPackGiveTheSameOutputs) {
  BertConfig c;
  c.vocab_size = ByteTokenizer::vocab_size(), c.hidden_size = 16, c.num_attention_heads = 2;
  c.num_hidden_layers = 2, c.intermediate_size = 24, c.max_position_embeddings = 24;
  BertModel m(c);
  m.init_random(7);
  const auto ex = examples();
  const LaidOutBatch pad = lay_out(ex, Batching::kPad, 0), pack = lay_out(ex, Batching::kPack, 24);
  std::vector<int64_t> lengths;
  for (const auto& e : ex) lengths.push_back(int64_t(e.tokens.size()));
  std::vector<BertExample> sorted;
  for (int64_t i : bucket_order(lengths, int64_t(ex.size()), 1)) sorted.push_back(ex[size_t(i)]);
  const LaidOutBatch bucket = lay_out(sorted, Batching::kBucket, 0);

  int64_t longest = 0, real = 0;
  for (auto n : lengths) longest = std::max(longest, n), real += n;
  EXPECT_EQ(pad.computed_tokens(), int64_t(ex.size()) * longest);
  EXPECT_EQ(pad.real_tokens, real);
  EXPECT_EQ(pack.computed_tokens() % 24, 0);
  EXPECT_LT(pack.computed_tokens(), pad.computed_tokens());
  EXPECT_EQ(pack.nsp.size(), ex.size());

  const Outputs a = run(m, ex, pad), b = run(m, ex, pack), d = run(m, sorted, bucket);
  for (size_t i = 0; i < ex.size(); ++i) expect_same_rows(a.per_example[i], b.per_example[i], "pack", i);
  const auto order = bucket_order(lengths, int64_t(ex.size()), 1);
  for (size_t k = 0; k < order.size(); ++k)
    expect_same_rows(a.per_example[size_t(order[k])], d.per_example[k], "bucket", size_t(order[k]));
  // Losses are means over the same terms summed in another order: float rounding only.
  EXPECT_GT(a.losses.mlm_count, 0);
  EXPECT_EQ(a.losses.mlm_count, b.losses.mlm_count);
  for (const Outputs* r : {&b, &d}) {
    EXPECT_NEAR(r->losses.mlm, a.losses.mlm, 1e-6 * a.losses.mlm * double(a.losses.mlm_count));
    EXPECT_NEAR(r->losses.nsp, a.losses.nsp, 1e-6 * a.losses.nsp * double(ex.size()));
  }
}

TEST(BertBatching, ReusedBuffersGiveTheSameGradientsAsAFreshModel) {
  // The model keeps its activation buffers when the token count changes (pad, then a smaller
  // pack, then pad again); a training step (dropout on) must not see stale values: gradients
  // equal, bitwise, those of a fresh model that only ran that batch.
  const ThreadCountScope one_thread(1);
  BertConfig c;
  c.vocab_size = ByteTokenizer::vocab_size(), c.hidden_size = 16, c.num_attention_heads = 2;
  c.num_hidden_layers = 2, c.intermediate_size = 24, c.max_position_embeddings = 24;
  c.hidden_dropout_prob = 0.1, c.attention_probs_dropout_prob = 0.1;
  const auto ex = examples();
  const LaidOutBatch pad = lay_out(ex, Batching::kPad, 0), pack = lay_out(ex, Batching::kPack, 24);
  auto step = [](BertModel& m, const LaidOutBatch& b) {
    m.set_training(true, 11);
    m.zero_grad();
    const float loss = m.forward(b.batch(), b.targets()).total;
    m.backward();
    return std::pair(loss, std::vector<float>(m.gradients().begin(), m.gradients().end()));
  };
  BertModel reused(c), fresh_pack(c), fresh_pad(c);
  for (BertModel* m : {&reused, &fresh_pack, &fresh_pad}) m->init_random(7);
  step(reused, pad);
  const auto after_pad = step(reused, pack), want_pack = step(fresh_pack, pack);
  EXPECT_EQ(after_pad.first, want_pack.first);
  EXPECT_EQ(after_pad.second, want_pack.second);
  const auto after_pack = step(reused, pad), want_pad = step(fresh_pad, pad);
  EXPECT_EQ(after_pack.first, want_pad.first);
  EXPECT_EQ(after_pack.second, want_pad.second);
}

TEST(BertBatching, BucketOrderGroupsSimilarLengths) {
  const std::vector<int64_t> lengths{9, 1, 8, 2, 7, 3, 6, 4};
  const auto order = bucket_order(lengths, 2, 5);
  ASSERT_EQ(order.size(), lengths.size());
  for (size_t b = 0; b < order.size(); b += 2)  // each batch holds neighbours in sorted order
    EXPECT_LE(std::abs(lengths[size_t(order[b])] - lengths[size_t(order[b + 1])]), 1);
  EXPECT_THROW(parse_batching("packed"), Error);
  EXPECT_THROW(lay_out(examples(), Batching::kPack, 5), Error);
}

}  // namespace
}  // namespace attnkit
