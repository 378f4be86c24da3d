#pragma once
// Helpers shared by the CLI commands: reading --data into documents and token streams, and
// drawing figures with Debian's matplotlib.
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/io/text_corpus.hpp"

namespace attnkit::cli {

// A failure whose one line `attnkit: error: ...` is already on stderr (main() prints nothing more).
class ReportedError : public Error {
 public:
  using Error::Error;
};

// Documents from --data: "fortunes", "bible", or text files (one document each).
std::vector<std::string> load_documents(const std::vector<std::string>& data);
// The token stream of --split ("validation", "train" or "all" = train then validation) of --data.
std::vector<int32_t> load_split_tokens(const std::vector<std::string>& data, const std::string& split);
// Runs the Python `script` (matplotlib) as `python3 - ARGS...` with Debian's /usr/bin/python3
// (or python3 on PATH) for `flag`. An exception in the script prints one line
// `attnkit: error: FLAG: ...` and throws ReportedError; other failures throw attnkit::Error.
void run_python(const char* script, const std::vector<std::string>& args, const std::string& flag);

}  // namespace attnkit::cli
