// read_file_text(): one binary read of a whole file, with errors that name it.
#include "attnkit/core/file_io.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "attnkit/core/error.hpp"

namespace attnkit {

std::string read_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(bool(in), path, ": cannot open: ", std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  check(!in.bad(), path, ": read error");
  return std::move(s).str();
}

}  // namespace attnkit
