#pragma once
// Byte-level tokenizer: token ids 0..255 are the bytes themselves, so any byte string (invalid
// UTF-8 included) encodes losslessly; special tokens follow at 256..260. No merges, no
// normalisation. Python equivalent: list(s.encode()) and bytes(ids) for the byte ids.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit {

// How decode renders special tokens.
struct TokenDecodeOptions {
  bool skip_special = false;  // true: drop special tokens; false: render them as their names
};

class ByteTokenizer {
 public:
  static constexpr int32_t kEndOfText = 256;  // "<|endoftext|>": separates (precedes) documents
  static constexpr int32_t kPad = 257;        // "<|pad|>"
  static constexpr int32_t kMask = 258;       // "[MASK]" (masked LM)
  static constexpr int32_t kCls = 259;        // "[CLS]"
  static constexpr int32_t kSep = 260;        // "[SEP]"
  static constexpr int32_t kVocabSize = 261;

  // Number of token ids (261): 256 bytes + 5 special tokens.
  static constexpr int32_t vocab_size() { return kVocabSize; }
  // True for ids 256..260.
  static constexpr bool is_special(int32_t id) { return id >= 256 && id < kVocabSize; }
  // Name of a special token ("<|endoftext|>", ...); throws attnkit::Error for other ids.
  static std::string_view special_name(int32_t id);

  // Token ids [bytes.size()] of arbitrary bytes: byte b becomes id b. Never fails. Text that
  // spells a special token's name is encoded as ordinary bytes, never as the special id.
  static std::vector<int32_t> encode(std::string_view bytes);
  // Appends the ids of `bytes` to `out` (no allocation beyond out's growth).
  static void encode_append(std::string_view bytes, std::vector<int32_t>& out);
  // Bytes of `ids` [n]: id < 256 is that byte; special ids are rendered as their names or
  // skipped (options); ids outside [0, 261) throw attnkit::Error naming the position.
  static std::string decode(std::span<const int32_t> ids,
                            const TokenDecodeOptions& options = {});
};

}  // namespace attnkit
