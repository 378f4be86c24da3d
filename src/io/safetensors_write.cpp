// Safetensors writer: validates the tensors, builds the JSON header (data laid out sorted by name,
// header space-padded to a multiple of 8 bytes as Hugging Face does) and writes atomically:
// temp file in the same directory, fsync, rename over the target, fsync the directory.
// Python equivalent: safetensors.numpy.save_file(tensors, path, metadata).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "attnkit/core/error.hpp"
#include "attnkit/io/safetensors.hpp"

static_assert(std::endian::native == std::endian::little, "safetensors data are little-endian");

namespace attnkit {
namespace {

using nlohmann::json;

std::string errno_text(int err) { return std::system_category().message(err); }

// Byte size of `t` from its dtype and shape; throws on negative dims, overflow, or a data size
// that does not match.
uint64_t checked_nbytes(const std::string& path, const TensorToWrite& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape) {
    check(d >= 0, path, ": tensor \"", t.name, "\": negative dimension ", d);
    check(!__builtin_mul_overflow(n, uint64_t(d), &n), path, ": tensor \"", t.name,
          "\": element count overflows 64 bits");
  }
  uint64_t bytes = 0;
  check(!__builtin_mul_overflow(n, uint64_t(dtype_size(t.dtype)), &bytes), path, ": tensor \"",
        t.name, "\": byte size overflows 64 bits");
  check(bytes == t.data.size(), path, ": tensor \"", t.name, "\": data holds ", t.data.size(),
        " bytes but ", dtype_name(t.dtype), " x ", n, " elements needs ", bytes);
  return bytes;
}

// The padded header text; `order` receives the tensors sorted by name (their data-section order).
std::string build_header(const std::string& path, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata,
                         std::vector<const TensorToWrite*>& order) {
  order.clear();
  for (const TensorToWrite& t : tensors) {
    check(!t.name.empty(), path, ": empty tensor name");
    check(t.name != "__metadata__", path, ": \"__metadata__\" is reserved, not a tensor name");
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(),
            [](const TensorToWrite* a, const TensorToWrite* b) { return a->name < b->name; });
  for (size_t i = 1; i < order.size(); ++i)
    check(order[i - 1]->name != order[i]->name, path, ": duplicate tensor name \"", order[i]->name, "\"");

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t pos = 0;
  for (const TensorToWrite* t : order) {
    const uint64_t n = checked_nbytes(path, *t);
    check(!__builtin_add_overflow(pos, n, &pos), path, ": total size overflows 64 bits");
    header[t->name] = {{"dtype", std::string(dtype_name(t->dtype))},
                       {"shape", t->shape},
                       {"data_offsets", {pos - n, pos}}};
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception&) {
    fail(path, ": a tensor name or metadata string is not valid UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-byte aligned
  check(text.size() <= kSafetensorsMaxHeaderSize, path, ": header of ", text.size(),
        " bytes exceeds the limit of ", kSafetensorsMaxHeaderSize, " bytes that readers accept");
  return text;
}

// Writes all of [p, p + n) or returns the errno of the failing write.
int write_all(int fd, const std::byte* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= size_t(w);
  }
  return 0;
}

// Owns the temp file until it is renamed: closes and unlinks it on every early exit.
struct TempFile {
  std::string path;
  int fd = -1;
  bool renamed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!renamed) ::unlink(path.c_str());
  }
};

void fsync_directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(path, ": written, but cannot open directory ", dir, " to fsync: ", errno_text(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems do not support fsync on directories; that is not a failed write.
  if (rc != 0 && err != EINVAL && err != ENOTSUP)
    fail(path, ": written, but fsync of directory ", dir, " failed: ", errno_text(err));
}

}  // namespace

void save_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> order;
  const std::string header = build_header(path, tensors, metadata, order);

  mode_t mode = 0644;  // a replaced file keeps its permission bits
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) mode = st.st_mode & 07777;

  TempFile tmp{path + ".tmp.XXXXXX"};
  tmp.fd = ::mkostemp(tmp.path.data(), O_CLOEXEC);
  if (tmp.fd < 0) {
    const int err = errno;
    tmp.renamed = true;  // nothing was created
    fail(path, ": cannot create temporary file ", tmp.path, ": ", errno_text(err));
  }
  if (::fchmod(tmp.fd, mode) != 0) fail(path, ": cannot set mode of ", tmp.path, ": ", errno_text(errno));

  std::byte prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = std::byte((uint64_t(header.size()) >> (8 * i)) & 0xff);
  int err = write_all(tmp.fd, prefix, 8);
  if (!err) err = write_all(tmp.fd, reinterpret_cast<const std::byte*>(header.data()), header.size());
  for (const TensorToWrite* t : order)
    if (!err) err = write_all(tmp.fd, t->data.data(), t->data.size());
  if (err) fail(path, ": cannot write ", tmp.path, ": ", errno_text(err));
  if (::fsync(tmp.fd) != 0) fail(path, ": fsync of ", tmp.path, " failed: ", errno_text(errno));
  const int rc = ::close(std::exchange(tmp.fd, -1));
  if (rc != 0) fail(path, ": close of ", tmp.path, " failed: ", errno_text(errno));
  if (::rename(tmp.path.c_str(), path.c_str()) != 0)
    fail(path, ": cannot rename ", tmp.path, " over it: ", errno_text(errno));
  tmp.renamed = true;
  fsync_directory_of(path);
}

}  // namespace attnkit
