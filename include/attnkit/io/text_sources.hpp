#pragma once
// Text sources by name, as the --data option of every text command (and Python) names them:
// "fortunes" (Debian's fortune files), "bible" (the King James Bible), or paths of text files.
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit {

// Documents of `data`: "fortunes", "bible", or text files (one document each), in order. Throws
// attnkit::Error naming --data for an unreadable file or when there are no documents.
std::vector<std::string> load_documents(const std::vector<std::string>& data);
// The byte tokens of `split` of `data`'s TextCorpus: "validation", "train" or "all" (train then
// validation). Throws attnkit::Error naming --split for another split name.
std::vector<int32_t> load_split_tokens(const std::vector<std::string>& data, const std::string& split);

}  // namespace attnkit
