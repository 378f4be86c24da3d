// Text sources by name (see text_sources.hpp).
#include "attnkit/io/text_sources.hpp"

#include "attnkit/core/error.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/io/text_corpus.hpp"

namespace attnkit {

std::vector<std::string> load_documents(const std::vector<std::string>& data) {
  std::vector<std::string> docs;
  for (const auto& d : data) {
    if (d != "fortunes" && d != "bible") check_readable_file(d, "--data");
    std::vector<std::string> part = d == "fortunes" ? load_fortunes()
                                    : d == "bible"  ? load_bible_kjv()
                                                    : load_text_files({d});
    docs.insert(docs.end(), part.begin(), part.end());
  }
  check(!docs.empty(), "--data: no documents");
  return docs;
}

std::vector<int32_t> load_split_tokens(const std::vector<std::string>& data, const std::string& split) {
  check(split == "validation" || split == "train" || split == "all",
        "--split: expected validation, train or all, got '", split, "'");
  const TextCorpus corpus(load_documents(data));
  std::vector<int32_t> out;
  if (split != "validation") {
    const auto a = corpus.tokens(Split::train);
    out.assign(a.begin(), a.end());
  }
  if (split != "train") {
    const auto b = corpus.tokens(Split::validation);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

}  // namespace attnkit
