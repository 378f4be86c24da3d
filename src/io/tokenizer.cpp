// Byte-level tokenizer: ids 0..255 are bytes, 256..260 special tokens (see tokenizer.hpp).
#include "attnkit/io/tokenizer.hpp"

#include <array>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

constexpr std::array<std::string_view, 5> kSpecialNames = {"<|endoftext|>", "<|pad|>", "[MASK]",
                                                           "[CLS]", "[SEP]"};
static_assert(kSpecialNames.size() == ByteTokenizer::kVocabSize - 256);

}  // namespace

std::string_view ByteTokenizer::special_name(int32_t id) {
  check(is_special(id), "special_name: id ", id, " is not a special token (expected 256..",
        kVocabSize - 1, ")");
  return kSpecialNames[size_t(id - 256)];
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view bytes) {
  std::vector<int32_t> out;
  encode_append(bytes, out);
  return out;
}

void ByteTokenizer::encode_append(std::string_view bytes, std::vector<int32_t>& out) {
  out.reserve(out.size() + bytes.size());
  // Through unsigned char: plain char is signed on x86, and byte 0xFF must become 255, not -1.
  for (char c : bytes) out.push_back(int32_t(static_cast<unsigned char>(c)));
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids,
                                  const TokenDecodeOptions& options) {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    check(id >= 0 && id < kVocabSize, "decode: ids[", i, "] = ", id, " out of range [0, ",
          kVocabSize, ")");
    if (id < 256)
      out.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    else if (!options.skip_special)
      out.append(special_name(id));
  }
  return out;
}

}  // namespace attnkit
