// Safetensors reader: maps the file read-only and validates it completely before use (header
// length, UTF-8, JSON with duplicate-key detection, dtypes, shapes, 64-bit overflow, and byte
// ranges that tile the data section exactly); converts F32/F16/BF16 tensors to float32.
// Python equivalent: safetensors.numpy.load_file(path), which enforces the same range rules.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <utility>

#include "attnkit/core/error.hpp"
#include "attnkit/io/safetensors.hpp"

static_assert(std::endian::native == std::endian::little, "safetensors data are little-endian");

namespace attnkit {
namespace {

using nlohmann::json;

constexpr int kMaxJsonNesting = 64;  // the schema needs 3; deeper input is hostile, stop early
constexpr size_t kMaxQuoted = 120;   // bytes of a name echoed in an error message

// Throws attnkit::Error("<source>: <parts>").
struct Reporter {
  const std::string& source;
  template <class... Parts>
  [[noreturn]] void operator()(const Parts&... parts) const {
    fail(source, ": ", parts...);
  }
};

// A name for an error message: quoted, control bytes escaped (messages stay one line), and cut
// after kMaxQuoted bytes at a UTF-8 character boundary.
std::string quote_name(std::string_view s) {
  std::string out = "\"";
  size_t i = 0;
  for (; i < s.size() && i < kMaxQuoted; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      if (c == '"' || c == '\\') out += '\\';
      out += char(c);
    }
  }
  if (i < s.size()) {
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
    if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
    out += "...";
  }
  return out + "\"";
}

// Offset of the first byte that does not start a well-formed UTF-8 sequence (no overlongs, no
// surrogates, nothing above U+10FFFF), or npos if `s` is valid.
size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return i;
    if (s.size() - i < len) return i;
    const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < lo || c1 > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      const unsigned char ck = static_cast<unsigned char>(s[i + k]);
      if (ck < 0x80 || ck > 0xBF) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// Parses the header text. nlohmann keeps the last of duplicate keys silently, so a parser
// callback tracks the keys of every open object and rejects a repeat; it also bounds nesting.
json parse_header_json(std::string_view text, const Reporter& bad) {
  std::vector<std::set<std::string, std::less<>>> open_objects;
  std::string entry;  // the current top-level key, for messages
  int nesting = 0;
  auto callback = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (++nesting > kMaxJsonNesting) bad("header JSON nests deeper than ", kMaxJsonNesting, " levels");
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        [[fallthrough]];
      case json::parse_event_t::array_end:
        --nesting;
        break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(key).second) {
          if (nesting == 1 && key == "__metadata__") bad("duplicate __metadata__ in header");
          if (nesting == 1) bad("duplicate tensor name ", quote_name(key), " in header");
          bad("duplicate key ", quote_name(key), " in header entry ", quote_name(entry));
        }
        if (nesting == 1) entry = key;
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    bad("header is not valid JSON: ", e.what());
  }
}

std::map<std::string, std::string> parse_metadata(const json& v, const Reporter& bad) {
  if (!v.is_object()) bad("__metadata__ is not a JSON object of strings (it is ", v.type_name(), ")");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) bad("__metadata__ value for key ", quote_name(key), " is not a string");
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// The "shape" array as dimensions; each must be an integer in [0, 2^63).
std::vector<int64_t> parse_shape(const std::string& t, const json& shape, const Reporter& bad) {
  if (!shape.is_array()) bad(t, ": shape is not a JSON array (it is ", shape.type_name(), ")");
  std::vector<int64_t> dims;
  dims.reserve(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    const json& d = shape[i];
    if (!d.is_number_integer()) bad(t, ": shape[", i, "] is not an integer (it is ", d.type_name(), ")");
    if (!d.is_number_unsigned() && d.get<int64_t>() < 0)
      bad(t, ": negative dimension ", d.get<int64_t>(), " in shape[", i, "]");
    const uint64_t u = d.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()))
      bad(t, ": shape[", i, "] = ", u, " exceeds the largest dimension 2^63 - 1");
    dims.push_back(int64_t(u));
  }
  return dims;
}

// {numel, numel × dtype size} of a parsed shape, rejecting 64-bit overflow. Overflow is judged
// on the non-zero dimensions, so [2^40, 2^40, 0] is rejected too (numpy would refuse it).
std::pair<uint64_t, uint64_t> checked_size(const std::string& t, const std::vector<int64_t>& dims,
                                           DType dtype, const Reporter& bad) {
  uint64_t count = 1;
  bool has_zero = false;
  for (int64_t d : dims) {
    if (d == 0) has_zero = true;
    else if (__builtin_mul_overflow(count, uint64_t(d), &count) ||
             count > uint64_t(std::numeric_limits<int64_t>::max()))
      bad(t, ": element count of shape overflows 64 bits");
  }
  const uint64_t numel = has_zero ? 0 : count;
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, uint64_t(dtype_size(dtype)), &nbytes))
    bad(t, ": byte size ", numel, " x ", dtype_size(dtype), " overflows 64 bits");
  return {numel, nbytes};
}

// Validates one tensor entry against the schema and its own byte range (not yet against others).
TensorInfo parse_entry(const std::string& name, const json& v, uint64_t data_len,
                       const Reporter& bad) {
  const std::string t = "tensor " + quote_name(name);
  if (name.empty()) bad("empty tensor name in header");
  if (!v.is_object()) bad(t, ": entry is not a JSON object (it is ", v.type_name(), ")");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) bad(t, ": missing \"", key, "\"");
  const json& dt = v.at("dtype");
  const json& offsets = v.at("data_offsets");

  TensorInfo info;
  info.name = name;
  if (!dt.is_string()) bad(t, ": dtype is not a string (it is ", dt.type_name(), ")");
  const auto dtype = parse_dtype(dt.get_ref<const std::string&>());
  if (!dtype) bad(t, ": unknown dtype ", quote_name(dt.get_ref<const std::string&>()));
  info.dtype = *dtype;
  info.shape = parse_shape(t, v.at("shape"), bad);
  const auto [numel, nbytes] = checked_size(t, info.shape, info.dtype, bad);

  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    bad(t, ": data_offsets is not [begin, end] with two non-negative integers");
  info.begin = offsets[0].get<uint64_t>();
  info.end = offsets[1].get<uint64_t>();
  if (info.end < info.begin) bad(t, ": data_offsets end ", info.end, " < begin ", info.begin);
  if (info.end - info.begin != nbytes)
    bad(t, ": byte range [", info.begin, ", ", info.end, ") holds ", info.end - info.begin,
        " bytes but ", dtype_name(info.dtype), " x ", numel, " elements needs ", nbytes);
  if (info.end > data_len)
    bad(t, ": byte range [", info.begin, ", ", info.end, ") is out of bounds of the ", data_len,
        "-byte data section");
  return info;
}

// Sorts by (begin, end) and requires the ranges to tile [0, data_len) exactly.
void check_tiling(std::vector<TensorInfo>& infos, uint64_t data_len, const Reporter& bad) {
  std::sort(infos.begin(), infos.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& info : infos) {
    if (info.begin < pos)  // prev ends at pos, so prev exists here
      bad("tensors ", quote_name(prev->name), " [", prev->begin, ", ", prev->end, ") and ",
          quote_name(info.name), " [", info.begin, ", ", info.end, ") overlap");
    if (info.begin > pos)
      bad("gap of ", info.begin - pos, " bytes in the data section at offset ", pos,
          " (before tensor ", quote_name(info.name), ")");
    pos = info.end;
    prev = &info;
  }
  if (pos != data_len)
    bad(data_len - pos, " trailing bytes in the data section after the last tensor (tensors cover ",
        pos, " of ", data_len, " bytes)");
}

[[noreturn]] void fail_too_short(const Reporter& bad, uint64_t size) {
  bad("file is ", size, " bytes, shorter than the 8-byte header length prefix");
}

}  // namespace

int64_t TensorInfo::numel() const {
  uint64_t n = 1;  // unsigned: wraps instead of UB for a hand-made, unvalidated TensorInfo
  for (int64_t d : shape) n *= uint64_t(d);
  return int64_t(n);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : source_(path) {
  const Reporter bad{source_};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad("cannot open: ", std::system_category().message(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    bad("cannot stat: ", std::system_category().message(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    bad("not a regular file");
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail_too_short(bad, size);
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (p == MAP_FAILED) bad("cannot mmap ", size, " bytes: ", std::system_category().message(err));
  map_ = p;
  map_size_ = size;
  file_ = {static_cast<const std::byte*>(p), size};
  try {
    validate();
  } catch (...) {
    unmap();  // the destructor does not run for a throwing constructor
    throw;
  }
}

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> whole_file, std::string source) {
  SafetensorsFile f;
  f.file_ = whole_file;
  f.source_ = std::move(source);
  f.validate();
  return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_size_(std::exchange(o.map_size_, 0)),
      file_(std::exchange(o.file_, {})),
      source_(std::move(o.source_)),
      header_size_(std::exchange(o.header_size_, 0)),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    unmap();
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    file_ = std::exchange(o.file_, {});
    source_ = std::move(o.source_);
    header_size_ = std::exchange(o.header_size_, 0);
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() noexcept {
  if (map_) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
  file_ = {};
}

void SafetensorsFile::validate() {
  const Reporter bad{source_};
  const uint64_t size = file_.size();
  if (size < 8) fail_too_short(bad, size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint64_t(file_[size_t(i)]);
  if (n > size - 8)
    bad("header length ", n, " exceeds file size ", size, " (at most ", size - 8,
        " bytes follow the length prefix)");
  if (n > kSafetensorsMaxHeaderSize)
    bad("header length ", n, " exceeds the limit of ", kSafetensorsMaxHeaderSize, " bytes");
  header_size_ = n;
  const std::string_view text(reinterpret_cast<const char*>(file_.data() + 8), size_t(n));
  if (const size_t at = find_invalid_utf8(text); at != std::string_view::npos)
    bad("header is not valid UTF-8 (bad byte at header offset ", at, ")");
  const json header = parse_header_json(text, bad);
  if (!header.is_object()) bad("header is not a JSON object (it is ", header.type_name(), ")");

  const uint64_t data_len = size - 8 - n;
  std::vector<TensorInfo> infos;
  infos.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") metadata_ = parse_metadata(value, bad);
    else infos.push_back(parse_entry(key, value, data_len, bad));
  }
  check_tiling(infos, data_len, bad);
  tensors_ = std::move(infos);
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& info) const {
  check(info.begin <= info.end && info.end <= data_size(), source_, ": tensor ", quote_name(info.name),
        ": byte range [", info.begin, ", ", info.end, ") is not inside the data section");
  return file_.subspan(size_t(8 + header_size_ + info.begin), size_t(info.end - info.begin));
}

std::vector<float> SafetensorsFile::read_f32(std::string_view name) const {
  const TensorInfo* info = find(name);
  check(info != nullptr, source_, ": no tensor named ", quote_name(name));
  const std::span<const std::byte> b = bytes(*info);
  const size_t n = size_t(info->numel());
  std::vector<float> out(n);
  // memcpy, never a typed load: tensor data has no alignment guarantee.
  switch (info->dtype) {
    case DType::f32:
      if (n) std::memcpy(out.data(), b.data(), n * 4);
      break;
    case DType::f16:
    case DType::bf16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b.data() + 2 * i, 2);
        out[i] = info->dtype == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      break;
    default:
      fail(source_, ": tensor ", quote_name(name), " has dtype ", dtype_name(info->dtype),
           "; read_f32 needs F32, F16 or BF16");
  }
  return out;
}

}  // namespace attnkit
