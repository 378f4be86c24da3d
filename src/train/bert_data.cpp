// BERT examples, masked-LM corruption and NSP pairs (see bert_data.hpp). Random numbers come from
// Philox4x32 (core/rng.hpp) with a distinct constant per use in the first counter word.
#include "attnkit/train/bert_data.hpp"

#include <algorithm>

#include "attnkit/core/error.hpp"
#include "attnkit/core/rng.hpp"
#include "attnkit/io/text_corpus.hpp"
#include "attnkit/io/tokenizer.hpp"

namespace attnkit {
namespace {

constexpr uint32_t kSelectDomain = 0x4D4C4D31u;  // "MLM1": select, then replacement kind
constexpr uint32_t kReplaceDomain = 0x4D4C4D32u;  // "MLM2": the random token
constexpr uint32_t kExampleDomain = 0x45584D50u;  // "EXMP": document, offsets, NSP coin

// Four Philox words at (domain, key, item).
std::array<uint32_t, 4> draw(uint64_t seed, uint32_t domain, uint64_t key, uint32_t item) {
  return philox4x32(seed, {item, uint32_t(key), uint32_t(key >> 32), domain});
}

int64_t below(uint32_t bits, int64_t n) { return int64_t((uint64_t(bits) * uint64_t(n)) >> 32); }

}  // namespace

void apply_mlm_mask(BertExample& e, const MlmOptions& o, uint64_t key) {
  check(o.select >= 0 && o.select <= 1 && o.mask >= 0 && o.random >= 0 && o.mask + o.random <= 1,
        "MlmOptions: select, mask, random must be probabilities with mask + random <= 1");
  e.mlm.assign(e.tokens.size(), -1);
  for (size_t i = 0; i < e.tokens.size(); ++i) {
    const int32_t tok = e.tokens[i];
    if (ByteTokenizer::is_special(tok)) continue;
    const auto r = draw(o.seed, kSelectDomain, key, uint32_t(i));
    if (uniform_from_bits(r[0]) >= o.select) continue;
    e.mlm[i] = tok;
    const float kind = uniform_from_bits(r[1]);
    if (kind < o.mask)
      e.tokens[i] = ByteTokenizer::kMask;
    else if (kind < o.mask + o.random)
      e.tokens[i] = int32_t(below(draw(o.seed, kReplaceDomain, key, uint32_t(i))[0], 256));
  }
}

BertDocuments split_documents(const std::vector<std::string>& docs, const std::vector<int32_t>& labels,
                              double fraction, uint64_t split_seed) {
  check(labels.empty() || labels.size() == docs.size(), "split_documents: labels: expected ",
        docs.size(), " entries, got ", labels.size());
  BertDocuments out;
  const TextCorpusOptions o{.validation_fraction = fraction, .split_seed = split_seed};
  for (size_t i = 0; i < docs.size(); ++i) {
    if (docs[i].size() < 2) continue;
    const bool val = is_validation_document(int64_t(i), o);
    (val ? out.validation : out.train).push_back(ByteTokenizer::encode(docs[i]));
    if (!labels.empty()) (val ? out.validation_labels : out.train_labels).push_back(labels[i]);
  }
  return out;
}

BertExample document_example(std::span<const int32_t> doc, int32_t label, int64_t max_len) {
  check(max_len >= 3, "document_example: max_len must be >= 3, got ", max_len);
  BertExample e;
  const size_t n = std::min(doc.size(), size_t(max_len - 2));
  e.tokens.push_back(ByteTokenizer::kCls);
  e.tokens.insert(e.tokens.end(), doc.begin(), doc.begin() + ptrdiff_t(n));
  e.tokens.push_back(ByteTokenizer::kSep);
  e.types.assign(e.tokens.size(), 0);
  e.label = label;
  return e;
}

BertExample make_bert_example(const std::vector<std::vector<int32_t>>& docs,
                              std::span<const int32_t> labels, const BertExampleOptions& o,
                              uint64_t index) {
  check(!docs.empty(), "make_bert_example: no documents");
  check(o.max_len >= 5, "make_bert_example: max_len must be >= 5, got ", o.max_len);
  const auto r = draw(o.seed, kExampleDomain, index, 0);
  const auto r2 = draw(o.seed, kExampleDomain, index, 1);
  const int64_t d = below(r[0], int64_t(docs.size()));
  const auto& doc = docs[size_t(d)];
  BertExample e;
  // A chunk of up to `budget` tokens of `src` at a random offset.
  auto chunk = [](const std::vector<int32_t>& src, int64_t budget, uint32_t bits) {
    const int64_t n = std::min<int64_t>(int64_t(src.size()), budget);
    const int64_t start = below(bits, int64_t(src.size()) - n + 1);
    return std::span<const int32_t>(src.data() + start, size_t(n));
  };
  if (!o.nsp) {
    e = document_example(chunk(doc, o.max_len - 2, r[1]), -1, o.max_len);
  } else {
    const auto text = chunk(doc, o.max_len - 3, r[1]);  // >= 2 tokens (split_documents)
    const int64_t n = int64_t(text.size()), split = 1 + below(r[2], n - 1);
    std::span<const int32_t> a = text.first(size_t(split)), b = text.subspan(size_t(split));
    e.nsp = uniform_from_bits(r[3]) < 0.5f ? 0 : 1;
    if (e.nsp == 1 && docs.size() > 1) {
      int64_t other = below(r2[0], int64_t(docs.size()) - 1);
      if (other >= d) ++other;  // any document but this one
      b = chunk(docs[size_t(other)], n - split, r2[1]);
    } else {
      e.nsp = 0;
    }
    e.tokens.push_back(ByteTokenizer::kCls);
    e.tokens.insert(e.tokens.end(), a.begin(), a.end());
    e.tokens.push_back(ByteTokenizer::kSep);
    e.types.assign(e.tokens.size(), 0);
    e.tokens.insert(e.tokens.end(), b.begin(), b.end());
    e.tokens.push_back(ByteTokenizer::kSep);
    e.types.resize(e.tokens.size(), 1);
  }
  if (!labels.empty()) e.label = labels[size_t(d)];
  if (o.mlm) {
    MlmOptions m = o.masking;
    m.seed ^= o.seed;
    apply_mlm_mask(e, m, index);
  }
  return e;
}

}  // namespace attnkit
