#pragma once
// Whole-file reads with errors that say why: a missing file, a directory, no permission.
#include <string>

namespace attnkit {

// The bytes of the file at `path`. Throws attnkit::Error "WHO: PATH: reason" (no such file, is a
// directory, permission denied, read error); `who` names the flag or function that asked.
std::string read_file(const std::string& path, const std::string& who = "");

// Throws attnkit::Error "WHO: PATH: reason" unless `path` exists, is not a directory and this
// process may read it.
void check_readable_file(const std::string& path, const std::string& who = "");

}  // namespace attnkit
