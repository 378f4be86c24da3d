#pragma once
// Text corpora for language-model training: documents (arbitrary bytes) from files, Debian's
// fortunes or the King James Bible, tokenized with ByteTokenizer; each document is preceded by
// <|endoftext|> (as GPT-2 / llm.c data are laid out), so documents are separated by that token.
// A deterministic train/validation split by document, and a batch sampler that draws [B, L+1]
// token windows (inputs = [:, :L], next-token targets = [:, 1:]) from the counter-based RNG: the
// batch for (seed, step) is a pure function of them, so training resumes with no sampler state.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

// Where Debian's `fortunes` packages install their text files.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// Fortune entries of one fortune file's text: the blocks between lines consisting only of "%"
// (a trailing "\r" tolerated). Entries keep their line breaks; blank entries are dropped.
std::vector<std::string> split_fortune_entries(std::string_view text);
// The fortune text files in `dir`, sorted by name. Rule: regular files directly in `dir` whose
// names do not end in ".dat" (strfile index) or ".u8" (Debian's UTF-8 alias); symlinks are
// skipped (the .u8 aliases, and links into offensive collections), subdirectories are not
// entered (fortunes-off installs into "off/"). Throws attnkit::Error if `dir` is unreadable.
std::vector<std::string> list_fortune_files(const std::string& dir = kFortunesDir);
// Every fortune entry of every file list_fortune_files(dir) names, one document each, in file
// then entry order. Throws attnkit::Error if there are none.
std::vector<std::string> load_fortunes(const std::string& dir = kFortunesDir);
// The King James Bible (Debian packages bible-kjv, bible-kjv-text), one document per chapter
// (1189), verses on their own lines: the text of `bible -f Gen1:1-Rev22:21 | cut -d' ' -f2-`,
// split where the chapter changes. Runs `bible` from PATH; throws attnkit::Error if it is absent
// or fails.
std::vector<std::string> load_bible_kjv();
// The bytes of each file in `paths`, one document per file (any bytes; no UTF-8 check).
std::vector<std::string> load_text_files(const std::vector<std::string>& paths);

enum class Split { train, validation };

struct TextCorpusOptions {
  double validation_fraction = 0.05;  // expected share of documents in validation, in [0, 1]
  uint64_t split_seed = 0;            // keys the per-document hash
};

// True if document `index` belongs to validation: philox(split_seed, index) / 2^32 < fraction.
// Depends only on (index, options), so appending documents never moves existing ones.
bool is_validation_document(int64_t index, const TextCorpusOptions& options);

// A tokenized corpus split by document into two token streams.
class TextCorpus {
 public:
  // Tokenizes `documents` (any bytes); each split's stream is, for each of its documents in
  // input order, <|endoftext|> followed by the document's byte ids.
  explicit TextCorpus(const std::vector<std::string>& documents,
                      const TextCorpusOptions& options = {});

  // The token ids [n] of one split.
  std::span<const int32_t> tokens(Split split) const;
  // Indices (into the constructor's documents) of one split's documents, ascending.
  const std::vector<int64_t>& documents(Split split) const;
  // Number of documents given to the constructor.
  int64_t num_documents() const { return num_documents_; }

 private:
  int64_t num_documents_ = 0;
  std::vector<int32_t> train_tokens_, validation_tokens_;
  std::vector<int64_t> train_docs_, validation_docs_;
};

struct BatchSamplerOptions {
  int64_t batch = 8;     // B rows per batch
  int64_t seq_len = 64;  // L input tokens per row; each window holds L + 1 tokens
  uint64_t seed = 0;     // keys the window positions
};

// Start offset of row `row` of batch `step`: uniform in [0, num_tokens - L - 1], from
// philox(seed, (row, step)). Throws attnkit::Error if num_tokens < L + 1.
int64_t window_start(int64_t num_tokens, const BatchSamplerOptions& options, uint64_t step,
                     int64_t row);
// Fills out [B, L+1] (int32) with random windows of `tokens` [n] for batch `step`; row b is
// tokens[s_b, s_b + L] with s_b = window_start(n, options, step, b).
void sample_batch(std::span<const int32_t> tokens, const BatchSamplerOptions& options,
                  uint64_t step, View<int32_t, 2> out);
// As above, into a new [B, L+1] tensor.
Tensor<int32_t, 2> sample_batch(std::span<const int32_t> tokens,
                                const BatchSamplerOptions& options, uint64_t step);

// Number of non-overlapping evaluation windows of L + 1 tokens (consecutive windows share one
// token: window w is tokens[w·L, w·L + L]): (n - 1) / L.
int64_t num_sequential_windows(int64_t num_tokens, int64_t seq_len);
// Fills out [B, L+1] with windows first_window .. first_window + B - 1 (see above); throws
// attnkit::Error if the last one is past num_sequential_windows.
void sequential_batch(std::span<const int32_t> tokens, int64_t first_window, View<int32_t, 2> out);

}  // namespace attnkit
