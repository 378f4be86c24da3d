// IDX decoding (see idx.hpp): gzip inflation with zlib, streamed so that a file can never make
// us allocate more than its declared payload plus one probe byte, then header and size checks.
#include "attnkit/io/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

constexpr int kMaxRank = 8;

bool is_gzip(std::span<const std::byte> f) {
  return f.size() >= 2 && f[0] == std::byte{0x1f} && f[1] == std::byte{0x8b};
}

// Bytes of an IDX file in order, from memory or inflated from a gzip stream on demand.
class Source {
 public:
  Source(std::span<const std::byte> file, const std::string& name)
      : file_(file), name_(name), gz_(is_gzip(file)) {
    if (!gz_) return;
    std::memset(&zs_, 0, sizeof zs_);
    check(inflateInit2(&zs_, 15 + 16) == Z_OK, name_, ": zlib: cannot start inflating");
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(file.data()));
    zs_.avail_in = 0;
    fed_ = 0;
  }
  ~Source() {
    if (gz_) inflateEnd(&zs_);
  }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  // Appends up to n bytes to out; returns how many were available.
  size_t read(std::vector<std::byte>& out, size_t n) {
    const size_t start = out.size();
    if (!gz_) {
      const size_t take = std::min(n, file_.size() - pos_);
      out.insert(out.end(), file_.begin() + std::ptrdiff_t(pos_),
                 file_.begin() + std::ptrdiff_t(pos_ + take));
      pos_ += take;
      return take;
    }
    constexpr size_t kChunk = size_t(1) << 20;  // grow the output as data arrives, not upfront
    while (out.size() - start < n && !ended_) {
      const size_t want = std::min(kChunk, n - (out.size() - start));
      const size_t before = out.size();
      out.resize(before + want);
      zs_.next_out = reinterpret_cast<Bytef*>(out.data() + before);
      zs_.avail_out = uInt(want);
      feed();
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      out.resize(before + (want - zs_.avail_out));
      if (rc == Z_STREAM_END) {
        // Concatenated gzip members form one stream (as gzip -d reads them).
        if (zs_.avail_in > 0 || fed_ < file_.size()) {
          check(inflateReset(&zs_) == Z_OK, name_, ": zlib: cannot restart inflating");
        } else {
          ended_ = true;
        }
      } else if (rc == Z_BUF_ERROR && zs_.avail_in == 0 && fed_ == file_.size()) {
        fail(name_, ": truncated gzip stream (compressed data ends before the end marker)");
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        fail(name_, ": corrupt gzip stream (zlib: ", zs_.msg ? zs_.msg : "error ", rc, ")");
      }
    }
    return out.size() - start;
  }

  // After the payload: the gzip stream must end here (valid trailer), and nothing may follow.
  void expect_end(uint64_t payload_end) {
    std::vector<std::byte> extra;
    const size_t n = read(extra, 1);
    check(n == 0, name_, ": trailing bytes after the ", payload_end,
          "-byte payload the header declares");
    if (!gz_) return;
    check(ended_, name_, ": truncated gzip stream (no end marker after the payload)");
  }

 private:
  void feed() {
    if (zs_.avail_in > 0 || fed_ == file_.size()) return;
    const size_t take = std::min<size_t>(file_.size() - fed_, std::numeric_limits<uInt>::max());
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(file_.data() + fed_));
    zs_.avail_in = uInt(take);
    fed_ += take;
  }

  std::span<const std::byte> file_;
  const std::string& name_;
  bool gz_;
  size_t pos_ = 0;
  z_stream zs_{};
  size_t fed_ = 0;
  bool ended_ = false;
};

uint32_t big_endian_u32(const std::byte* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

bool known_type(uint8_t b) {
  return b == 0x08 || b == 0x09 || b == 0x0B || b == 0x0C || b == 0x0D || b == 0x0E;
}

// Reverses each element's bytes in place when the host is little-endian (IDX is big-endian).
void to_host_order(std::vector<std::byte>& data, size_t elem) {
  if (elem == 1 || std::endian::native == std::endian::big) return;
  for (size_t i = 0; i + elem <= data.size(); i += elem)
    std::reverse(data.begin() + std::ptrdiff_t(i), data.begin() + std::ptrdiff_t(i + elem));
}

}  // namespace

size_t idx_type_size(IdxType t) {
  switch (t) {
    case IdxType::u8: case IdxType::i8: return 1;
    case IdxType::i16: return 2;
    case IdxType::i32: case IdxType::f32: return 4;
    case IdxType::f64: return 8;
  }
  fail("idx_type_size: unknown IDX type ", int(t));
}

const char* idx_type_name(IdxType t) {
  switch (t) {
    case IdxType::u8: return "u8";
    case IdxType::i8: return "i8";
    case IdxType::i16: return "i16";
    case IdxType::i32: return "i32";
    case IdxType::f32: return "f32";
    case IdxType::f64: return "f64";
  }
  fail("idx_type_name: unknown IDX type ", int(t));
}

int64_t IdxArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

IdxArray parse_idx(std::span<const std::byte> file, const std::string& name) {
  Source src(file, name);
  std::vector<std::byte> head;
  check(src.read(head, 4) == 4, name, ": file is ", head.size(),
        " bytes (after decompression), shorter than the 4-byte IDX magic number");
  check(head[0] == std::byte{0} && head[1] == std::byte{0}, name,
        ": bad IDX magic number: the first two bytes must be 0, got 0x", std::hex,
        int(head[0]), " 0x", int(head[1]));
  const uint8_t type = uint8_t(head[2]), rank = uint8_t(head[3]);
  check(known_type(type), name, ": unknown IDX type byte 0x", std::hex, int(type),
        " (expected 0x08, 0x09, 0x0b, 0x0c, 0x0d or 0x0e)");
  check(rank >= 1 && rank <= kMaxRank, name, ": IDX rank ", int(rank), " outside [1, ", kMaxRank,
        "]");
  IdxArray out;
  out.type = IdxType(type);
  std::vector<std::byte> dims;
  check(src.read(dims, 4 * size_t(rank)) == 4 * size_t(rank), name, ": header truncated: rank ",
        int(rank), " needs ", 4 * int(rank), " bytes of dimensions, got ", dims.size());
  const uint64_t elem = idx_type_size(out.type);
  uint64_t bytes = elem;
  for (int d = 0; d < rank; ++d) {
    const uint32_t n = big_endian_u32(dims.data() + 4 * d);
    out.shape.push_back(int64_t(n));
    // Each factor is < 2^32 and the running product stays <= 2^32, so this cannot overflow.
    bytes = n == 0 ? 0 : bytes * n;
    check(bytes <= kIdxMaxBytes, name, ": dimensions declare more than ", kIdxMaxBytes,
          " bytes of data (dimension ", d, " = ", n, ")");
  }
  const size_t got = src.read(out.data, size_t(bytes));
  check(got == bytes, name, ": payload truncated: the header declares ", bytes, " bytes of ",
        idx_type_name(out.type), " data, the file holds ", got);
  src.expect_end(bytes);
  to_host_order(out.data, size_t(elem));
  return out;
}

IdxArray read_idx(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(bool(in), path, ": cannot open for reading");
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check(!in.bad(), path, ": read error");
  return parse_idx(std::as_bytes(std::span<const char>(raw)), path);
}

}  // namespace attnkit
