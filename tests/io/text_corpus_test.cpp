// Text corpora: fortune parsing, the document split (deterministic, disjoint, complete, about
// the requested share, stable when documents are appended), the (seed, step) sampler
// (reproducible, order-free, in bounds), sequential windows, and the real Debian data if present.
#include "attnkit/io/text_corpus.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "attnkit/core/error.hpp"
#include "attnkit/io/tokenizer.hpp"

namespace attnkit {
namespace {

std::vector<std::string> numbered_docs(int n) {
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i)
    docs.push_back("doc " + std::to_string(i) + std::string(size_t(i % 7), '!'));
  return docs;
}

TEST(TextCorpus, SplitsFortuneEntries) {
  const auto e = split_fortune_entries("one\n%\ntwo\nlines\n%\n%\n  \n%\r\nlast");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], "one\n");
  EXPECT_EQ(e[1], "two\nlines\n");
  EXPECT_EQ(e[2], "last");
  EXPECT_TRUE(split_fortune_entries("%\n%\n").empty());
  // "%" inside a line is text.
  EXPECT_EQ(split_fortune_entries("100% sure\n%\n").at(0), "100% sure\n");
}

TEST(TextCorpus, SplitIsDeterministicDisjointAndComplete) {
  const auto docs = numbered_docs(4000);
  const TextCorpusOptions o{.validation_fraction = 0.05, .split_seed = 11};
  const TextCorpus a(docs, o), b(docs, o);
  const auto& tr = a.documents(Split::train);
  const auto& va = a.documents(Split::validation);
  EXPECT_EQ(tr, b.documents(Split::train));
  EXPECT_EQ(va, b.documents(Split::validation));
  EXPECT_TRUE(std::equal(a.tokens(Split::train).begin(), a.tokens(Split::train).end(),
                         b.tokens(Split::train).begin(), b.tokens(Split::train).end()));
  std::set<int64_t> all(tr.begin(), tr.end());
  for (int64_t i : va) EXPECT_TRUE(all.insert(i).second) << "document " << i << " in both";
  EXPECT_EQ(all.size(), docs.size());
  // 5 % of 4000 = 200 expected; binomial sd ≈ 13.8, so ±60 is > 4 sd.
  EXPECT_NEAR(double(va.size()), 200.0, 60.0);
  // Another seed gives another split; appending documents keeps the existing assignment.
  const TextCorpus c(docs, {.validation_fraction = 0.05, .split_seed = 12});
  EXPECT_NE(c.documents(Split::validation), va);
  auto more = docs;
  more.push_back("extra");
  const TextCorpus d(more, o);
  const auto& va2 = d.documents(Split::validation);
  EXPECT_TRUE(std::equal(va.begin(), va.end(), va2.begin()));
  EXPECT_TRUE(TextCorpus(docs, {.validation_fraction = 0.0}).documents(Split::validation).empty());
  EXPECT_TRUE(TextCorpus(docs, {.validation_fraction = 1.0}).documents(Split::train).empty());
  EXPECT_THROW(TextCorpus(docs, {.validation_fraction = 1.5}), Error);
}

TEST(TextCorpus, TokenStreamIsEndOfTextThenBytesPerDocument) {
  const std::vector<std::string> docs = {"ab", std::string("\xff\x00", 2), "c"};
  const TextCorpus corpus(docs, {.validation_fraction = 0.0});
  const auto t = corpus.tokens(Split::train);
  const std::vector<int32_t> expected = {256, 'a', 'b', 256, 255, 0, 256, 'c'};
  EXPECT_TRUE(std::equal(t.begin(), t.end(), expected.begin(), expected.end()));
  EXPECT_EQ(corpus.num_documents(), 3);
}

TEST(TextCorpus, SamplerReproducibleFromSeedAndStep) {
  std::vector<int32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i);  // token = its position
  const BatchSamplerOptions o{.batch = 4, .seq_len = 16, .seed = 42};
  const auto late = sample_batch(tokens, o, 7);   // drawn first: no hidden state
  const auto s3 = sample_batch(tokens, o, 3);
  const auto s3_again = sample_batch(tokens, o, 3);
  const auto s7 = sample_batch(tokens, o, 7);
  EXPECT_EQ(s3.view().data[0], s3_again.view().data[0]);
  EXPECT_TRUE(std::equal(s3.data(), s3.data() + s3.numel(), s3_again.data()));
  EXPECT_TRUE(std::equal(s7.data(), s7.data() + s7.numel(), late.data()));
  EXPECT_FALSE(std::equal(s3.data(), s3.data() + s3.numel(), s7.data()));
  const auto other_seed = sample_batch(tokens, {.batch = 4, .seq_len = 16, .seed = 43}, 3);
  EXPECT_FALSE(std::equal(s3.data(), s3.data() + s3.numel(), other_seed.data()));
  // Rows are contiguous windows of L+1 tokens inside the stream.
  for (int64_t b = 0; b < 4; ++b) {
    const int32_t start = s3.view()(b, 0);
    EXPECT_EQ(start, window_start(1000, o, 3, b));
    EXPECT_LE(start + 16, 999);
    for (int64_t j = 0; j <= 16; ++j) EXPECT_EQ(s3.view()(b, j), start + j);
  }
}

TEST(TextCorpus, SamplerCoversEveryStartIncludingTheLast) {
  // 20 tokens, L = 4: starts 0..15 must all occur over enough draws, and nothing beyond.
  std::vector<int32_t> tokens(20);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i);
  const BatchSamplerOptions o{.batch = 8, .seq_len = 4, .seed = 1};
  std::set<int64_t> starts;
  for (uint64_t step = 0; step < 100; ++step)
    for (int64_t b = 0; b < 8; ++b) starts.insert(window_start(20, o, step, b));
  EXPECT_EQ(starts.size(), 16u);
  EXPECT_EQ(*starts.begin(), 0);
  EXPECT_EQ(*starts.rbegin(), 15);
  EXPECT_THROW(sample_batch(std::vector<int32_t>(4), o, 0), Error);  // fewer than L+1 tokens
  Tensor<int32_t, 2> wrong({8, 4});
  EXPECT_THROW(sample_batch(tokens, o, 0, wrong.view()), Error);
}

TEST(TextCorpus, SequentialWindowsShareOneToken) {
  std::vector<int32_t> tokens(21);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i);
  EXPECT_EQ(num_sequential_windows(21, 4), 5);
  Tensor<int32_t, 2> out({2, 5});
  sequential_batch(tokens, 3, out.view());
  EXPECT_EQ(out.view()(0, 0), 12);
  EXPECT_EQ(out.view()(1, 4), 20);
  EXPECT_THROW(sequential_batch(tokens, 4, out.view()), Error);
}

TEST(TextCorpus, LoadsArbitraryBytesFromFiles) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("attnkit_corpus_" + std::to_string(::getpid()) + ".bin");
  const std::string bytes("\x00\xff\xc3\x28 text\n", 9);
  std::ofstream(path, std::ios::binary) << bytes;
  const auto docs = load_text_files({path.string()});
  std::filesystem::remove(path);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0], bytes);
  EXPECT_THROW(load_text_files({"/nonexistent/attnkit.txt"}), Error);
  EXPECT_THROW(list_fortune_files("/nonexistent/fortunes"), Error);
}

TEST(TextCorpus, RealFortunes) {
  if (!std::filesystem::is_directory(kFortunesDir)) GTEST_SKIP() << kFortunesDir << " absent";
  const auto files = list_fortune_files();
  ASSERT_GT(files.size(), 10u);
  for (const auto& f : files) {
    EXPECT_FALSE(f.ends_with(".dat") || f.ends_with(".u8")) << f;
    EXPECT_FALSE(std::filesystem::is_symlink(f)) << f;
  }
  const auto docs = load_fortunes();
  EXPECT_GT(docs.size(), 5000u);
  EXPECT_NE(std::find(docs.begin(), docs.end(), "A day for firm decisions!!!!!  Or is it?\n"),
            docs.end());
  for (const auto& d : docs) ASSERT_EQ(d.find("\n%\n"), std::string::npos);
  const TextCorpus corpus(docs);
  EXPECT_GT(corpus.tokens(Split::validation).size(), 10000u);
  const auto batch = sample_batch(corpus.tokens(Split::train), {.batch = 2, .seq_len = 128}, 0);
  EXPECT_EQ(batch.shape()[1], 129);
}

TEST(TextCorpus, RealBibleMatchesTheShellPipeline) {
  if (std::system("command -v bible >/dev/null 2>&1") != 0) GTEST_SKIP() << "bible not installed";
  const auto chapters = load_bible_kjv();
  EXPECT_EQ(chapters.size(), 1189u);
  EXPECT_TRUE(chapters.front().starts_with("In the beginning God created the heaven"));
  std::string joined;
  for (const auto& c : chapters) joined += c;
  FILE* p = popen("bible -f Gen1:1-Rev22:21 | cut -d' ' -f2-", "r");
  ASSERT_NE(p, nullptr);
  std::string expected;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) expected.append(buf, n);
  pclose(p);
  EXPECT_EQ(joined.size(), expected.size());
  EXPECT_TRUE(joined == expected);
}

}  // namespace
}  // namespace attnkit
