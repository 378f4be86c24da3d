// Pad / bucket / pack layouts of BERT examples (see bert_batching.hpp).
#include "attnkit/train/bert_batching.hpp"

#include <algorithm>
#include <numeric>

#include "attnkit/core/error.hpp"
#include "attnkit/core/rng.hpp"
#include "attnkit/io/tokenizer.hpp"

namespace attnkit {

Batching parse_batching(const std::string& name) {
  if (name == "pad") return Batching::kPad;
  if (name == "bucket") return Batching::kBucket;
  if (name == "pack") return Batching::kPack;
  fail("--batching: expected pad, bucket or pack, got '", name, "'");
}

const char* batching_name(Batching b) {
  return b == Batching::kPad ? "pad" : b == Batching::kBucket ? "bucket" : "pack";
}

BertTargets LaidOutBatch::targets() const {
  BertTargets t;
  if (std::any_of(mlm.begin(), mlm.end(), [](int32_t x) { return x >= 0; })) t.mlm = mlm;
  t.nsp = nsp;
  t.labels = labels.empty() ? std::span<const int32_t>(token_labels) : std::span<const int32_t>(labels);
  t.start_positions = starts;
  t.end_positions = ends;
  return t;
}

namespace {

// Appends example e as a segment (and the bookkeeping of a real sequence).
void append_example(LaidOutBatch& out, const BertExample& e, int32_t index) {
  out.seqs.push_back(int32_t(out.cu.size()) - 1);
  out.order.push_back(index);
  out.start[size_t(index)] = int32_t(out.tokens.size());
  out.tokens.insert(out.tokens.end(), e.tokens.begin(), e.tokens.end());
  out.types.insert(out.types.end(), e.types.begin(), e.types.end());
  if (e.mlm.empty())
    out.mlm.resize(out.tokens.size(), -1);
  else
    out.mlm.insert(out.mlm.end(), e.mlm.begin(), e.mlm.end());
  if (e.nsp >= 0) out.nsp.push_back(e.nsp);
  if (e.label >= 0) out.labels.push_back(e.label);
  if (!e.token_labels.empty()) {
    out.token_labels.resize(out.tokens.size() - e.tokens.size(), -1);
    out.token_labels.insert(out.token_labels.end(), e.token_labels.begin(), e.token_labels.end());
  }
  if (e.span_start >= 0) out.starts.push_back(e.span_start), out.ends.push_back(e.span_end);
  out.cu.push_back(int32_t(out.tokens.size()));
  out.real_tokens += int64_t(e.tokens.size());
}

// Appends a padding segment of n tokens (possibly empty).
void append_padding(LaidOutBatch& out, int64_t n) {
  out.tokens.resize(out.tokens.size() + size_t(n), ByteTokenizer::kPad);
  out.types.resize(out.tokens.size(), 0);
  out.mlm.resize(out.tokens.size(), -1);
  if (!out.token_labels.empty()) out.token_labels.resize(out.tokens.size(), -1);
  out.cu.push_back(int32_t(out.tokens.size()));
}

}  // namespace

LaidOutBatch lay_out(std::span<const BertExample> examples, Batching batching, int64_t row_len) {
  check(!examples.empty(), "lay_out: no examples");
  int64_t longest = 0;
  for (const auto& e : examples) {
    check(!e.tokens.empty() && e.types.size() == e.tokens.size() &&
              (e.mlm.empty() || e.mlm.size() == e.tokens.size()) &&
              (e.token_labels.empty() || e.token_labels.size() == e.tokens.size()),
          "lay_out: an example's tokens, types, mlm and token labels must have equal non-zero lengths");
    longest = std::max(longest, int64_t(e.tokens.size()));
  }
  const auto& e0 = examples[0];
  for (const auto& e : examples)
    check((e.nsp >= 0) == (e0.nsp >= 0) && (e.label >= 0) == (e0.label >= 0) &&
              e.token_labels.empty() == e0.token_labels.empty() && (e.span_start >= 0) == (e0.span_start >= 0),
          "lay_out: every example must have NSP labels / class labels / token labels / spans, or none");
  LaidOutBatch out;
  out.cu.push_back(0);
  out.start.assign(examples.size(), 0);
  if (batching != Batching::kPack) {
    for (size_t i = 0; i < examples.size(); ++i) {
      append_example(out, examples[i], int32_t(i));
      append_padding(out, longest - int64_t(examples[i].tokens.size()));
    }
    return out;
  }
  check(row_len >= longest, "lay_out: row_len (", row_len, ") must be >= the longest example (",
        longest, ")");
  std::vector<std::vector<int32_t>> rows;  // first fit, in example order
  std::vector<int64_t> used;
  for (size_t i = 0; i < examples.size(); ++i) {
    const int64_t n = int64_t(examples[i].tokens.size());
    size_t r = 0;
    while (r < rows.size() && used[r] + n > row_len) ++r;
    if (r == rows.size()) rows.emplace_back(), used.push_back(0);
    rows[r].push_back(int32_t(i));
    used[r] += n;
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int32_t i : rows[r]) append_example(out, examples[size_t(i)], i);
    append_padding(out, row_len - used[r]);
  }
  return out;
}

std::vector<int64_t> bucket_order(std::span<const int64_t> lengths, int64_t batch, uint64_t seed) {
  check(batch >= 1, "bucket_order: batch must be >= 1");
  std::vector<int64_t> idx(lengths.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return lengths[size_t(a)] < lengths[size_t(b)]; });
  const int64_t nb = (int64_t(idx.size()) + batch - 1) / batch;
  std::vector<int64_t> perm(static_cast<size_t>(nb));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = nb - 1; i > 0; --i) {  // Fisher-Yates on Philox draws
    const uint32_t bits = philox4x32(seed, {uint32_t(i), 0x4255434Bu, 0, 0})[0];
    std::swap(perm[size_t(i)], perm[size_t((uint64_t(bits) * uint64_t(i + 1)) >> 32)]);
  }
  std::vector<int64_t> out;
  for (int64_t b : perm)
    for (int64_t k = b * batch; k < std::min<int64_t>((b + 1) * batch, int64_t(idx.size())); ++k)
      out.push_back(idx[size_t(k)]);
  return out;
}

}  // namespace attnkit
