// Whole-file reads with errors that say why (see file_io.hpp).
#include "attnkit/core/file_io.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

std::string prefix(const std::string& who, const std::string& path) {
  return (who.empty() ? "" : who + ": ") + path;
}

}  // namespace

void check_readable_file(const std::string& path, const std::string& who) {
  namespace fs = std::filesystem;
  check(!path.empty(), who.empty() ? "file" : who, ": empty path");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  check(st.type() != fs::file_type::not_found, prefix(who, path), ": no such file");
  check(!ec, prefix(who, path), ": cannot access: ", ec.message());
  check(st.type() != fs::file_type::directory, prefix(who, path), ": is a directory, expected a file");
  check(access(path.c_str(), R_OK) == 0, prefix(who, path), ": cannot read: ", std::strerror(errno));
}

std::string read_file(const std::string& path, const std::string& who) {
  check_readable_file(path, who);
  std::ifstream in(path, std::ios::binary);
  check(bool(in), prefix(who, path), ": cannot open: ", std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  check(!in.bad(), prefix(who, path), ": read error");
  return std::move(s).str();
}

}  // namespace attnkit
