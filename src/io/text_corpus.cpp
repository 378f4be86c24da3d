// Text corpora: fortune / Bible / file loaders, the document split and the (seed, step) batch
// sampler (see text_corpus.hpp). Random numbers come from Philox4x32 (core/rng.hpp) with a
// distinct constant in the last counter word per use, so the split and the sampler never share
// a stream even with equal seeds.
#include "attnkit/io/text_corpus.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <system_error>

#include "attnkit/core/error.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/core/rng.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/io/tokenizer.hpp"

namespace attnkit {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kSplitDomain = 0x53504C54u;   // "SPLT"
constexpr uint32_t kSampleDomain = 0x53414D50u;  // "SAMP"

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' ||
                                                             c == '\r'; });
}

// Absolute path of `program` found on PATH, or "" if none is executable.
std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (fs::is_regular_file(candidate) && access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) return "";
    rest.remove_prefix(colon + 1);
  }
}

void check_window_options(const BatchSamplerOptions& o) {
  check(o.batch >= 1 && o.batch <= std::numeric_limits<uint32_t>::max(),
        "BatchSamplerOptions.batch: expected 1..2^32-1, got ", o.batch);
  check(o.seq_len >= 1, "BatchSamplerOptions.seq_len: expected >= 1, got ", o.seq_len);
}

}  // namespace

std::vector<std::string> split_fortune_entries(std::string_view text) {
  std::vector<std::string> entries;
  std::string current;
  auto flush = [&] {
    if (!is_blank(current)) entries.push_back(std::move(current));
    current.clear();
  };
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl == std::string_view::npos ? nl : nl + 1);
    text.remove_prefix(line.size());
    std::string_view bare = line;
    if (ends_with(bare, "\n")) bare.remove_suffix(1);
    if (ends_with(bare, "\r")) bare.remove_suffix(1);
    if (bare == "%")
      flush();
    else
      current.append(line);
  }
  flush();
  return entries;
}

std::vector<std::string> list_fortune_files(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  check(!ec, dir, ": cannot list fortune files: ", ec.message());
  std::vector<std::string> files;
  for (const fs::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (e.is_symlink(ec) || !e.is_regular_file(ec)) continue;  // .u8 aliases, links, "off/"
    if (ends_with(name, ".dat") || ends_with(name, ".u8")) continue;
    files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> load_fortunes(const std::string& dir) {
  std::vector<std::string> docs;
  for (const std::string& file : list_fortune_files(dir)) {
    auto entries = split_fortune_entries(read_file(file));
    docs.insert(docs.end(), std::make_move_iterator(entries.begin()),
                std::make_move_iterator(entries.end()));
  }
  check(!docs.empty(), dir, ": no fortune entries found (install Debian's `fortunes` package)");
  return docs;
}

std::vector<std::string> load_bible_kjv() {
  const std::string bible = find_on_path("bible");
  check(!bible.empty(),
        "load_bible_kjv: the `bible` program is not on PATH (install Debian's bible-kjv and "
        "bible-kjv-text packages)");
  const std::string command = "'" + bible + "' -f Gen1:1-Rev22:21";
  FILE* pipe = popen(command.c_str(), "r");
  check(pipe != nullptr, "load_bible_kjv: cannot run ", bible, ": ", std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  check(status == 0, "load_bible_kjv: `", command, "` failed with status ", status, ": ",
        out.substr(0, 200));
  // Each line is "<Book><chapter>:<verse> <text>"; a chapter ends where the part before ':'
  // changes. The verse text is what `cut -d' ' -f2-` keeps.
  std::vector<std::string> chapters;
  std::string_view rest = out, chapter_key;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const size_t colon = line.find(':');
    check(space != std::string_view::npos && colon < space,
          "load_bible_kjv: unexpected line from bible: \"", line.substr(0, 80), "\"");
    if (chapters.empty() || line.substr(0, colon) != chapter_key) {
      chapters.emplace_back();
      chapter_key = line.substr(0, colon);
    }
    chapters.back().append(line.substr(space + 1)).push_back('\n');
  }
  check(!chapters.empty(), "load_bible_kjv: `", command, "` printed no verses");
  return chapters;
}

std::vector<std::string> load_text_files(const std::vector<std::string>& paths) {
  std::vector<std::string> docs;
  docs.reserve(paths.size());
  for (const std::string& p : paths) docs.push_back(read_file(p));
  return docs;
}

bool is_validation_document(int64_t index, const TextCorpusOptions& options) {
  const double f = options.validation_fraction;
  check(f >= 0.0 && f <= 1.0, "TextCorpusOptions.validation_fraction: expected [0, 1], got ", f);
  check(index >= 0, "is_validation_document: index must be >= 0, got ", index);
  const uint64_t i = uint64_t(index);
  const uint32_t bits = philox4x32(options.split_seed, {uint32_t(i), uint32_t(i >> 32), 0u,
                                                        kSplitDomain})[0];
  return double(bits) * 0x1p-32 < f;
}

TextCorpus::TextCorpus(const std::vector<std::string>& documents, const TextCorpusOptions& options)
    : num_documents_(int64_t(documents.size())) {
  for (int64_t i = 0; i < num_documents_; ++i) {
    const bool val = is_validation_document(i, options);
    auto& toks = val ? validation_tokens_ : train_tokens_;
    (val ? validation_docs_ : train_docs_).push_back(i);
    toks.push_back(ByteTokenizer::kEndOfText);
    ByteTokenizer::encode_append(documents[size_t(i)], toks);
  }
}

std::span<const int32_t> TextCorpus::tokens(Split split) const {
  return split == Split::train ? train_tokens_ : validation_tokens_;
}

const std::vector<int64_t>& TextCorpus::documents(Split split) const {
  return split == Split::train ? train_docs_ : validation_docs_;
}

int64_t window_start(int64_t num_tokens, const BatchSamplerOptions& options, uint64_t step,
                     int64_t row) {
  check_window_options(options);
  check(num_tokens >= options.seq_len + 1, "sample_batch: tokens: need at least seq_len + 1 = ",
        options.seq_len + 1, " tokens, got ", num_tokens);
  check(row >= 0 && row < options.batch, "window_start: row ", row, " not in [0, ",
        options.batch, ")");
  const auto w = philox4x32(options.seed, {uint32_t(row), uint32_t(step), uint32_t(step >> 32),
                                           kSampleDomain});
  const uint64_t r = (uint64_t(w[1]) << 32) | w[0];
  const uint64_t starts = uint64_t(num_tokens - options.seq_len);  // valid starts 0..starts-1
  // Lemire's multiply-shift: floor(r · starts / 2^64), uniform up to a 2^-64 relative bias.
  return int64_t((static_cast<unsigned __int128>(r) * starts) >> 64);
}

void sample_batch(std::span<const int32_t> tokens, const BatchSamplerOptions& options,
                  uint64_t step, View<int32_t, 2> out) {
  check_window_options(options);
  check(out.shape[0] == options.batch && out.shape[1] == options.seq_len + 1,
        "sample_batch: out: expected [", options.batch, ", ", options.seq_len + 1, "], got [",
        out.shape[0], ", ", out.shape[1], "]");
  for (int64_t b = 0; b < options.batch; ++b) {
    const int64_t s = window_start(int64_t(tokens.size()), options, step, b);
    for (int64_t j = 0; j <= options.seq_len; ++j) out(b, j) = tokens[size_t(s + j)];
  }
}

Tensor<int32_t, 2> sample_batch(std::span<const int32_t> tokens,
                                const BatchSamplerOptions& options, uint64_t step) {
  check_window_options(options);
  Tensor<int32_t, 2> out({options.batch, options.seq_len + 1});
  sample_batch(tokens, options, step, out.view());
  return out;
}

int64_t num_sequential_windows(int64_t num_tokens, int64_t seq_len) {
  check(seq_len >= 1, "num_sequential_windows: seq_len must be >= 1, got ", seq_len);
  return num_tokens < 1 ? 0 : (num_tokens - 1) / seq_len;
}

void sequential_batch(std::span<const int32_t> tokens, int64_t first_window,
                      View<int32_t, 2> out) {
  const int64_t rows = out.shape[0], seq_len = out.shape[1] - 1;
  check(rows >= 0 && seq_len >= 1, "sequential_batch: out: expected [B, L+1] with L >= 1, got [",
        rows, ", ", out.shape[1], "]");
  const int64_t available = num_sequential_windows(int64_t(tokens.size()), seq_len);
  check(first_window >= 0 && first_window + rows <= available, "sequential_batch: windows [",
        first_window, ", ", first_window + rows, ") not within the ", available,
        " windows of length ", seq_len, " + 1");
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t s = (first_window + b) * seq_len;
    for (int64_t j = 0; j <= seq_len; ++j) out(b, j) = tokens[size_t(s + j)];
  }
}

}  // namespace attnkit
