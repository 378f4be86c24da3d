#pragma once
// Three ways to lay out the same variable-length BERT examples for one forward:
//   pad    every example padded to the longest in the batch (B rows of L_max tokens); each row is
//          a real segment plus a padding segment in cu_seqlens, so padding is never attended by
//          real tokens (the key-padding mask) but its tokens are still computed;
//   bucket as pad, but batches are formed from a pool of examples sorted by length, so examples
//          of similar length share a batch (bucket_order);
//   pack   examples placed first-fit into rows of `row_len` tokens, several per row, each its own
//          cu_seqlens segment, the row's tail a padding segment.
// Positions restart in every segment and attention never crosses one, so all three give every
// real token the same output (tests/train/bert_batching_test.cpp).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attnkit/models/bert.hpp"
#include "attnkit/train/bert_data.hpp"

namespace attnkit {

enum class Batching { kPad, kBucket, kPack };

// "pad", "bucket", "pack" → Batching; throws attnkit::Error naming --batching otherwise.
Batching parse_batching(const std::string& name);
const char* batching_name(Batching b);

// The storage of one BertBatch + BertTargets.
struct LaidOutBatch {
  std::vector<int32_t> tokens, types, cu, seqs, mlm;  // [T], [T], [S+1], [B], [T]
  std::vector<int32_t> nsp, labels;                   // [B] in sequence order (or empty)
  std::vector<int32_t> token_labels;                  // [T] (-1 on padding), or empty
  std::vector<int32_t> starts, ends;                  // [B] span targets in sequence order, or empty
  std::vector<int32_t> order;                         // [B] example index of each sequence
  std::vector<int32_t> start;                         // [B] first token of each example (by example)
  int64_t real_tokens = 0;                            // Σ example lengths
  int64_t computed_tokens() const { return int64_t(tokens.size()); }
  BertBatch batch() const { return {tokens, types, cu, seqs}; }
  // Targets present in the examples (MLM if any example has them, NSP, sequence or token labels,
  // spans).
  BertTargets targets() const;
};

// Lays out `examples` as pad (kPad and kBucket) or pack (rows of row_len >= every example).
LaidOutBatch lay_out(std::span<const BertExample> examples, Batching batching, int64_t row_len);

// Indices of `lengths` grouped for bucketing: sorted by (length, index), cut into batches of
// `batch`, and the batches' order shuffled by `seed` (so a run does not go short-to-long).
// Returns the concatenated batches.
std::vector<int64_t> bucket_order(std::span<const int64_t> lengths, int64_t batch, uint64_t seed);

}  // namespace attnkit
