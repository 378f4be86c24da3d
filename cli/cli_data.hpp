#pragma once
// Helpers shared by the CLI commands: drawing figures with Debian's matplotlib (and the --data
// readers of io/text_sources.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/io/text_corpus.hpp"
#include "attnkit/io/text_sources.hpp"  // load_documents, load_split_tokens (--data)

namespace attnkit::cli {

// A failure whose one line `attnkit: error: ...` is already on stderr (main() prints nothing more).
class ReportedError : public Error {
 public:
  using Error::Error;
};

// Runs the Python `script` (matplotlib) as `python3 - ARGS...` with Debian's /usr/bin/python3
// (or python3 on PATH) for `flag`. An exception in the script prints one line
// `attnkit: error: FLAG: ...` and throws ReportedError; other failures throw attnkit::Error.
void run_python(const char* script, const std::vector<std::string>& args, const std::string& flag);

}  // namespace attnkit::cli
