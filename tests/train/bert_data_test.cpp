// Masked-LM collator and NSP pairs: proportions checked statistically over many examples (bounds
// are 5 binomial standard deviations, computed from the sample counts), special tokens never
// selected or produced, NSP continuations genuine, and every draw reproducible from (seed, index).
#include "attnkit/train/bert_data.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/io/tokenizer.hpp"

namespace attnkit {
namespace {

std::vector<std::vector<int32_t>> random_docs(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < n; ++d) {
    std::vector<int32_t> doc(20 + rng() % 280);
    for (auto& t : doc) t = int32_t(rng() % 256);
    docs.push_back(doc);
  }
  return docs;
}

// |observed/n - p| within 5 standard deviations of a Binomial(n, p) share.
void expect_share(int64_t observed, int64_t n, double p, const char* what) {
  ASSERT_GT(n, 0);
  const double share = double(observed) / double(n), bound = 5 * std::sqrt(p * (1 - p) / double(n));
  EXPECT_LE(std::abs(share - p), bound) << what << ": " << share << " vs " << p << " over " << n;
}

TEST(BertData, MaskedLmProportionsAndNoSpecialTokens) {
  const auto docs = random_docs(40, 1);
  const BertExampleOptions o{.max_len = 96, .nsp = true, .mlm = true, .masking = {}, .seed = 17};
  int64_t candidates = 0, selected = 0, masked = 0, random = 0, kept = 0;
  for (uint64_t i = 0; i < 3000; ++i) {
    const BertExample e = make_bert_example(docs, {}, o, i);
    const BertExample clean = make_bert_example(docs, {}, {.max_len = 96, .nsp = true, .mlm = false, .masking = {}, .seed = 17}, i);
    ASSERT_EQ(e.tokens.size(), clean.tokens.size());
    ASSERT_EQ(e.mlm.size(), e.tokens.size());
    EXPECT_EQ(e.tokens.front(), ByteTokenizer::kCls);
    EXPECT_LE(int64_t(e.tokens.size()), o.max_len);
    for (size_t t = 0; t < e.tokens.size(); ++t) {
      const int32_t orig = clean.tokens[t];
      if (ByteTokenizer::is_special(orig)) {
        EXPECT_EQ(e.mlm[t], -1) << "a special token was selected";
        EXPECT_EQ(e.tokens[t], orig);
        continue;
      }
      ++candidates;
      if (e.mlm[t] < 0) {
        EXPECT_EQ(e.tokens[t], orig) << "an unselected token changed";
        continue;
      }
      EXPECT_EQ(e.mlm[t], orig);
      ++selected;
      if (e.tokens[t] == ByteTokenizer::kMask) {
        ++masked;
      } else {
        EXPECT_LT(e.tokens[t], 256) << "a random replacement was a special token";
        (e.tokens[t] == orig ? kept : random)++;
      }
    }
  }
  expect_share(selected, candidates, 0.15, "selected");
  expect_share(masked, selected, 0.8, "[MASK]");
  // A random byte equals the original with probability 1/256: it then counts as kept.
  expect_share(random, selected, 0.1 * 255.0 / 256.0, "random");
  expect_share(kept, selected, 0.1 + 0.1 / 256.0, "kept");
}

TEST(BertData, NextSentencePairsAreHalfGenuine) {
  const auto docs = random_docs(40, 2);
  const BertExampleOptions o{.max_len = 64, .nsp = true, .mlm = false, .masking = {}, .seed = 5};
  int64_t random = 0, n = 2000;
  for (uint64_t i = 0; i < uint64_t(n); ++i) {
    const BertExample e = make_bert_example(docs, {}, o, i);
    ASSERT_TRUE(e.nsp == 0 || e.nsp == 1);
    random += e.nsp;
    // Remove the specials: A·B is a contiguous chunk of a document iff B genuinely follows A.
    std::vector<int32_t> text;
    int seps = 0;
    for (size_t t = 0; t < e.tokens.size(); ++t) {
      if (e.tokens[t] == ByteTokenizer::kSep) ++seps;
      if (!ByteTokenizer::is_special(e.tokens[t])) text.push_back(e.tokens[t]);
      EXPECT_EQ(e.types[t], t == 0 || seps == 0 || (seps == 1 && e.tokens[t] == ByteTokenizer::kSep) ? 0 : 1);
    }
    EXPECT_EQ(seps, 2);
    const bool contiguous = std::any_of(docs.begin(), docs.end(), [&](const auto& d) {
      return std::search(d.begin(), d.end(), text.begin(), text.end()) != d.end();
    });
    EXPECT_EQ(contiguous, e.nsp == 0) << "example " << i;
  }
  expect_share(random, n, 0.5, "random B");
}

TEST(BertData, ExamplesAreAPureFunctionOfSeedAndIndex) {
  const auto docs = random_docs(10, 3);
  const BertExampleOptions o{.max_len = 48, .nsp = true, .mlm = true, .masking = {}, .seed = 9};
  const BertExample a = make_bert_example(docs, {}, o, 123), b = make_bert_example(docs, {}, o, 123);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.mlm, b.mlm);
  BertExampleOptions o2 = o;
  o2.seed = 10;
  EXPECT_NE(make_bert_example(docs, {}, o2, 123).tokens, a.tokens);
  EXPECT_THROW(make_bert_example({}, {}, o, 0), Error);
  EXPECT_THROW(make_bert_example(docs, {}, {.max_len = 4}, 0), Error);
}

TEST(BertData, DocumentExampleAndSplit) {
  const BertExample e = document_example(std::vector<int32_t>{1, 2, 3, 4, 5}, 2, 5);
  EXPECT_EQ(e.tokens, (std::vector<int32_t>{ByteTokenizer::kCls, 1, 2, 3, ByteTokenizer::kSep}));
  EXPECT_EQ(e.label, 2);
  const BertDocuments d = split_documents({"ab", "c", "hello", "world", "x y"}, {0, 1, 2, 3, 4}, 0.5, 1);
  EXPECT_EQ(d.train.size() + d.validation.size(), 4u);  // "c" is too short
  EXPECT_EQ(d.train.size(), d.train_labels.size());
}

}  // namespace
}  // namespace attnkit
