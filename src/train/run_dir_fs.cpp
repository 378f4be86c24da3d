// File-system steps of the run directory's commit protocol (see run_dir_fs.hpp).
#include "run_dir_fs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "attnkit/core/error.hpp"

namespace attnkit::run_dir_fs {
namespace fs = std::filesystem;

std::optional<int64_t> checkpoint_step(std::string_view name) {
  if (!name.starts_with(kCheckpointPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(kCheckpointPrefix.size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

bool is_temporary(std::string_view name) {
  return name.starts_with(kTempCheckpointPrefix) || name.find(".tmp") != std::string_view::npos;
}

bool is_run_file(std::string_view name) {
  for (std::string_view f : {"log.csv", "latest", "config.json", "model.safetensors", "optimizer.safetensors",
                             "preprocessor_config.json"})
    if (name == f) return true;
  return checkpoint_step(name).has_value() || is_temporary(name);
}

void sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  check(fd >= 0, "cannot open ", path, " to sync it: ", std::strerror(errno));
  const int rc = ::fsync(fd), err = errno;
  ::close(fd);
  check(rc == 0, "fsync of ", path, " failed: ", std::strerror(err));
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
    out.flush();
    check(bool(out), "cannot write ", tmp);
  }
  sync_path(tmp, false);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  check(!ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
  sync_path(fs::path(path).parent_path().string(), true);
}

void publish_file(const std::string& checkpoint, const std::string& dir, const std::string& name) {
  const std::string from = checkpoint + "/" + name, to = dir + "/" + name, tmp = to + ".tmp-publish";
  std::error_code ec;
  fs::remove(tmp, ec);
  // Already the same file: rename() of two links to one inode would do nothing and leave tmp.
  if (fs::exists(to, ec) && fs::equivalent(from, to, ec)) return;
  fs::create_hard_link(from, tmp, ec);
  if (ec) {  // a file system without hard links: a copy, synced before it is renamed into place
    ec.clear();
    fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);
    check(!ec, "cannot copy ", from, " to ", tmp, ": ", ec.message());
    sync_path(tmp, false);
  }
  fs::rename(tmp, to, ec);
  check(!ec, "cannot rename ", tmp, " to ", to, ": ", ec.message());
}

void remove_path(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  check(!ec, "cannot remove ", path, ": ", ec.message());
}

}  // namespace attnkit::run_dir_fs
