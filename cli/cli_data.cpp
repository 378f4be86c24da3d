// Shared CLI helpers: --data loading and matplotlib figures.
#include "cli_data.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

#include "attnkit/core/error.hpp"

namespace attnkit::cli {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(bool(in), "cannot read ", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> load_documents(const std::vector<std::string>& data) {
  std::vector<std::string> docs;
  for (const auto& d : data) {
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

namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

void run_python(const char* script, const std::vector<std::string>& args) {
  const std::string python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  std::string cmd = python + " -";
  for (const auto& a : args) cmd += " " + shell_quote(a);
  FILE* p = popen(cmd.c_str(), "w");
  check(p != nullptr, "--plot: cannot run ", python);
  std::fputs(script, p);
  const int status = pclose(p);
  check(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "--plot: the matplotlib script failed (python3-matplotlib installed? see scripts/setup)");
}

}  // namespace attnkit::cli
