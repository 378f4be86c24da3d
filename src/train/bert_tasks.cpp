// Fortune fine-tuning tasks: file classification and attribution tagging / span extraction (see
// bert_tasks.hpp).
#include "attnkit/train/bert_tasks.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "attnkit/core/error.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/io/text_corpus.hpp"
#include "attnkit/io/tokenizer.hpp"

namespace attnkit {
namespace {

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

std::optional<ByteRange> find_attribution(std::string_view e) {
  int64_t end = int64_t(e.size());
  while (end > 0 && blank(e[size_t(end - 1)])) --end;  // last non-blank byte + 1
  if (end == 0) return std::nullopt;
  const size_t nl = e.rfind('\n', size_t(end - 1));
  size_t i = nl == std::string_view::npos ? 0 : nl + 1;
  if (nl == std::string_view::npos) return std::nullopt;  // the whole entry is one line: no quote
  while (i < size_t(end) && blank(e[i])) ++i;
  if (i + 2 > size_t(end) || e.substr(i, 2) != "--") return std::nullopt;
  i += 2;
  while (i < size_t(end) && (blank(e[i]) || e[i] == '-')) ++i;
  if (i >= size_t(end)) return std::nullopt;
  return ByteRange{int64_t(i), end};
}

BertTaskData fortune_file_task(const std::vector<std::string>& classes, int64_t max_len,
                               const std::string& dir) {
  check(classes.size() >= 2, "--classes: need at least two fortunes files");
  for (size_t k = 1; k < classes.size(); ++k)
    check(std::find(classes.begin(), classes.begin() + ptrdiff_t(k), classes[k]) == classes.begin() + ptrdiff_t(k),
          "--classes: '", classes[k], "' is given twice (each class is one fortunes file)");
  std::vector<std::string> docs;
  std::vector<int32_t> labels;
  for (size_t k = 0; k < classes.size(); ++k) {
    const std::string path = dir + "/" + classes[k];
    check(std::filesystem::is_regular_file(path), "--classes: no fortunes file ", path);
    for (auto& e : split_fortune_entries(read_file(path))) {
      docs.push_back(std::move(e));
      labels.push_back(int32_t(k));
    }
  }
  const BertDocuments d = split_documents(docs, labels);
  BertTaskData t;
  t.labels = classes;
  for (size_t i = 0; i < d.train.size(); ++i) t.train.push_back(document_example(d.train[i], d.train_labels[i], max_len));
  for (size_t i = 0; i < d.validation.size(); ++i)
    t.validation.push_back(document_example(d.validation[i], d.validation_labels[i], max_len));
  return t;
}

BertTaskData attribution_task(const std::vector<std::string>& entries, bool span, int64_t max_len) {
  check(max_len >= 8, "attribution_task: max_len must be >= 8, got ", max_len);
  BertTaskData t;
  if (!span) t.labels = {"other", "name"};
  const TextCorpusOptions split{};
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto r = find_attribution(entries[i]);
    if (!r) continue;
    const std::string_view e = entries[i];
    const int64_t keep = std::min<int64_t>(int64_t(e.size()), max_len - 2);
    const int64_t cut = int64_t(e.size()) - keep;  // bytes dropped from the front
    if (r->begin < cut) continue;                  // a name longer than the window: skip
    BertExample x = document_example(ByteTokenizer::encode(e.substr(size_t(cut))), -1, max_len);
    const int64_t b = r->begin - cut + 1, last = r->end - 1 - cut + 1;  // +1: [CLS]
    if (span) {
      x.span_start = int32_t(b), x.span_end = int32_t(last);
    } else {
      x.token_labels.assign(x.tokens.size(), 0);
      x.token_labels.front() = x.token_labels.back() = -1;
      for (int64_t k = b; k <= last; ++k) x.token_labels[size_t(k)] = 1;
    }
    (is_validation_document(int64_t(i), split) ? t.validation : t.train).push_back(std::move(x));
  }
  check(!t.train.empty() && !t.validation.empty(), "attribution_task: no entries with an attribution");
  return t;
}

}  // namespace attnkit
