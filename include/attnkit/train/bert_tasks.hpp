#pragma once
// Fine-tuning tasks built from Debian's fortunes (byte tokens, examples of at most max_len tokens):
//   fortune-file        sequence classification: which of the given fortunes files an entry
//                       comes from; input [CLS] + the entry's first max_len - 2 bytes + [SEP].
//   attribution-tokens  token classification on entries that end with an attribution line (last
//                       non-blank line = optional blanks, "--", the name): label 1 on the bytes of
//                       the name (after "--" and blanks, up to the line's last non-blank byte),
//                       0 on every other byte, -1 (no loss) on [CLS]/[SEP].
//   attribution-span    span extraction on the same entries: start/end (inclusive) token index of
//                       the name. The "--" marker stays in the input, so the task is to find where
//                       the marker's line starts and ends; its difficulty is modest and stated so.
// Attribution inputs keep the entry's LAST max_len - 2 bytes, so the name is always inside.
// The split into train and validation is by entry (TextCorpus's document rule).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/train/bert_data.hpp"

namespace attnkit {

// Byte range [begin, end) of the attribution name of a fortune entry, if it has one.
struct ByteRange {
  int64_t begin = 0, end = 0;
};
std::optional<ByteRange> find_attribution(std::string_view entry);

// Prepared examples of a task, split into train and validation; label names for classification.
struct BertTaskData {
  std::vector<BertExample> train, validation;
  std::vector<std::string> labels;  // class names (fortune-file) or {"other", "name"} (tokens)
};

// The fortune-file task over the named files in `dir` (at least two).
BertTaskData fortune_file_task(const std::vector<std::string>& classes, int64_t max_len,
                               const std::string& dir);
// The attribution task over every fortune entry with an attribution: token labels (span =
// false) or span positions (span = true).
BertTaskData attribution_task(const std::vector<std::string>& entries, bool span, int64_t max_len);

}  // namespace attnkit
