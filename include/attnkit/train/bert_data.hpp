#pragma once
// BERT training examples from documents of byte tokens: [CLS] A [SEP] (B [SEP]) with token types,
// the masked-LM corruption (Devlin et al. 2019, §3.1) and next-sentence pairs. Every random
// choice is a Philox draw keyed by (seed, example index, position), so example i of a run is a
// pure function of (seed, i): training resumes and reproduces with no sampler state.
//
// Masked LM: each non-special token is selected with probability `select` (15 %); a selected
// token becomes [MASK] with probability `mask` (80 %), a uniformly random byte token (never a
// special token) with probability `random` (10 %), and stays itself otherwise (10 %). The target
// at a selected position is the original token, -1 elsewhere (no loss there). Special tokens
// ([CLS], [SEP], padding) are never selected.
// NSP: A is a prefix of a document chunk split at a uniform point; with probability 1/2 B is the
// rest of that chunk (label 0, "is next"), else a same-length chunk of another document (label 1).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace attnkit {

// One sequence and its targets (sizes n = tokens.size()).
struct BertExample {
  std::vector<int32_t> tokens;  // [n], starts with [CLS]
  std::vector<int32_t> types;   // [n] token type ids: 0 for [CLS] A [SEP], 1 for B [SEP]
  std::vector<int32_t> mlm;     // [n] masked-LM targets, -1 = no loss (empty: no MLM)
  int32_t nsp = -1;             // 0 = B follows A, 1 = random B, -1 = no NSP
  int32_t label = -1;           // sequence class (fine-tuning), -1 = none
  std::vector<int32_t> token_labels;  // [n] token classes, -1 = no loss (empty: none)
  int32_t span_start = -1, span_end = -1;  // answer span, inclusive token indices (-1: none)
};

struct MlmOptions {
  double select = 0.15;  // share of non-special tokens that carry a loss
  double mask = 0.8;     // of the selected: replaced by [MASK]
  double random = 0.1;   // of the selected: replaced by a random byte token (the rest stay)
  uint64_t seed = 0;
};

// Applies the masked-LM corruption to example.tokens in place and fills example.mlm; the draws
// are keyed by (options.seed, key, position).
void apply_mlm_mask(BertExample& example, const MlmOptions& options, uint64_t key);

// Documents as byte-token lists, split into train and validation by TextCorpus's document rule.
struct BertDocuments {
  std::vector<std::vector<int32_t>> train, validation;
  std::vector<int32_t> train_labels, validation_labels;  // per document (fine-tuning), or empty
};
// Tokenizes documents (any bytes); documents shorter than 2 bytes are dropped. labels: one per
// document or empty. The split is is_validation_document(index, {fraction, split_seed}).
BertDocuments split_documents(const std::vector<std::string>& docs, const std::vector<int32_t>& labels,
                              double validation_fraction = 0.05, uint64_t split_seed = 0);

struct BertExampleOptions {
  int64_t max_len = 128;  // tokens per example including [CLS]/[SEP] (<= max_position_embeddings)
  bool nsp = false;       // make NSP pairs (else one segment)
  bool mlm = true;        // apply the masked-LM corruption
  MlmOptions masking{};
  uint64_t seed = 0;      // keys document choice, chunk offsets, NSP coins (and masking.seed)
};

// Example `index` drawn from `docs` (a random document; a random chunk if it is longer than
// fits); label = labels[doc] when labels are given. Throws attnkit::Error if docs is empty or
// max_len < 5.
BertExample make_bert_example(const std::vector<std::vector<int32_t>>& docs,
                              std::span<const int32_t> labels, const BertExampleOptions& options,
                              uint64_t index);
// The classification example of document `doc`: [CLS] + its first max_len - 2 tokens + [SEP].
BertExample document_example(std::span<const int32_t> doc, int32_t label, int64_t max_len);

}  // namespace attnkit
