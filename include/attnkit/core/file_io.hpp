#pragma once
// Reading a whole file into memory (config.json, text corpora, task files).
#include <string>

namespace attnkit {

// The bytes of the file at `path`; throws attnkit::Error "<path>: cannot open: <reason>" or
// "<path>: read error".
std::string read_file_text(const std::string& path);

}  // namespace attnkit
