// Byte tokenizer: every byte round-trips, random (mostly invalid UTF-8) bytes round-trip, special
// tokens decode to their names or are skipped, out-of-range ids throw.
#include "attnkit/io/tokenizer.hpp"

#include <gtest/gtest.h>

#include <random>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

using Tok = ByteTokenizer;

TEST(Tokenizer, VocabularyLayout) {
  EXPECT_EQ(Tok::vocab_size(), 261);
  EXPECT_EQ(Tok::kEndOfText, 256);
  EXPECT_EQ(Tok::kPad, 257);
  EXPECT_EQ(Tok::special_name(256), "<|endoftext|>");
  EXPECT_EQ(Tok::special_name(257), "<|pad|>");
  EXPECT_EQ(Tok::special_name(258), "[MASK]");
  EXPECT_EQ(Tok::special_name(259), "[CLS]");
  EXPECT_EQ(Tok::special_name(260), "[SEP]");
  EXPECT_FALSE(Tok::is_special(255));
  EXPECT_TRUE(Tok::is_special(260));
  EXPECT_FALSE(Tok::is_special(261));
  EXPECT_THROW(Tok::special_name(65), Error);
}

TEST(Tokenizer, AllBytesRoundTrip) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::vector<int32_t> ids = Tok::encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[size_t(b)], b) << "byte " << b;
  EXPECT_EQ(Tok::decode(ids), all);
}

TEST(Tokenizer, RandomInvalidUtf8RoundTrips) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 300);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s;
    const int n = len(rng);
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(byte(rng)));
    if (trial % 2) s.append("\xC3\x28\xFF\xFE\xED\xA0\x80\xF4\x90");  // surely invalid UTF-8
    const auto ids = Tok::encode(s);
    ASSERT_EQ(ids.size(), s.size());
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 256);
    ASSERT_EQ(Tok::decode(ids), s);
  }
}

TEST(Tokenizer, SpecialTokensDecodeAsNamesOrAreSkipped) {
  const std::vector<int32_t> ids = {Tok::kEndOfText, 'h', 'i', Tok::kSep, Tok::kPad};
  EXPECT_EQ(Tok::decode(ids), "<|endoftext|>hi[SEP]<|pad|>");
  EXPECT_EQ(Tok::decode(ids, {.skip_special = true}), "hi");
  // Their names are text, not specials, when encoded.
  const auto back = Tok::encode("<|endoftext|>");
  EXPECT_EQ(back.size(), 13u);
  EXPECT_EQ(back[0], '<');
}

TEST(Tokenizer, EncodeAppendKeepsExisting) {
  std::vector<int32_t> ids = {Tok::kEndOfText};
  Tok::encode_append("ab", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 'a', 'b'}));
}

TEST(Tokenizer, OutOfRangeIdsThrowWithPosition) {
  const std::vector<int32_t> bad = {'a', 261};
  try {
    Tok::decode(bad);
    FAIL() << "expected attnkit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ids[1] = 261"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tok::decode(std::vector<int32_t>{-1}), Error);
  EXPECT_THROW(Tok::decode(std::vector<int32_t>{-1}, {.skip_special = true}), Error);
}

}  // namespace
}  // namespace attnkit
