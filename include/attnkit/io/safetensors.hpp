#pragma once
// Safetensors (Hugging Face's weight format) reader and writer.
//
// File layout:  [N: u64 little-endian][N bytes: UTF-8 JSON header][data section]
// The header maps each tensor name to {"dtype": "F32", "shape": [d0, d1, ...],
// "data_offsets": [begin, end]}, offsets in bytes from the start of the data section, plus an
// optional "__metadata__": {string: string}. Tensors are row-major, little-endian, with no
// alignment guarantee. Python equivalent: safetensors.numpy.load_file / save_file.
//
// Reading maps the file read-only and validates everything before returning: header size, UTF-8,
// JSON, duplicate keys, dtypes, shapes × dtype size = byte range, 64-bit overflow, and that the
// byte ranges tile the data section exactly (in bounds, no overlap, no gap, no trailing bytes).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/core/dtype.hpp"

namespace attnkit {

// Largest JSON header accepted (and written), in bytes; the limit Hugging Face's reader uses.
inline constexpr uint64_t kSafetensorsMaxHeaderSize = 100'000'000;

// One tensor's header entry; byte offsets are relative to the start of the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // outermost first; [] is a scalar (one element)
  uint64_t begin = 0, end = 0;  // byte range [begin, end) within the data section

  // Number of elements (product of shape; 1 for rank 0, 0 if any dimension is 0).
  int64_t numel() const;
  // Size of the byte range: numel() × dtype_size(dtype).
  uint64_t nbytes() const { return end - begin; }
};

// A validated, read-only safetensors file (memory-mapped) or in-memory buffer. Move-only.
class SafetensorsFile {
 public:
  // Maps `path` read-only and validates it; throws attnkit::Error prefixed with "<path>: ".
  // The file must not be truncated by another process while this object lives (SIGBUS).
  explicit SafetensorsFile(const std::string& path);

  // Validates a whole file already in memory, without copying: `whole_file` must outlive the
  // result. Errors are prefixed with "<source>: ".
  static SafetensorsFile parse(std::span<const std::byte> whole_file,
                               std::string source = "<memory>");

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  // Every tensor, in data-section order (ascending begin offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // The tensor called `name`, or nullptr.
  const TensorInfo* find(std::string_view name) const;
  // The tensor's raw little-endian bytes [nbytes()]; no alignment guarantee.
  std::span<const std::byte> bytes(const TensorInfo& info) const;
  // The "__metadata__" string map (empty if absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensor `name` converted to float32 [numel], row-major; dtype must be F32, F16 or BF16.
  std::vector<float> read_f32(std::string_view name) const;

  // Where errors point: the path, or the source name given to parse().
  const std::string& source() const { return source_; }
  // Total size in bytes: 8 + header_size() + data_size().
  uint64_t file_size() const { return file_.size(); }
  // Length N of the JSON header in bytes (including any padding).
  uint64_t header_size() const { return header_size_; }
  // Length of the data section in bytes (sum of all tensors' byte ranges).
  uint64_t data_size() const { return file_.empty() ? 0 : file_.size() - 8 - header_size_; }

 private:
  SafetensorsFile() = default;
  void validate();  // fills tensors_, index_, metadata_ from file_; throws on any defect
  void unmap() noexcept;

  void* map_ = nullptr;  // mmap'ed region owned by this object, or nullptr for parse()
  size_t map_size_ = 0;
  std::span<const std::byte> file_;
  std::string source_;
  uint64_t header_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `data` holds numel(shape) × dtype_size(dtype) little-endian bytes.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // outermost first; [] is a scalar
  std::span<const std::byte> data;
};

// Writes `tensors` and `metadata` to `path` atomically: a temp file "<path>.tmp.XXXXXX" in the same
// directory is written, fsync'ed and renamed over `path`, then the directory is fsync'ed. On any
// failure the temp file is removed, an existing `path` is left intact, and attnkit::Error is
// thrown. Data are laid out sorted by name; the header is space-padded to a multiple of 8 bytes.
// Names must be unique, non-empty, valid UTF-8 and not "__metadata__". New files get mode 0644.
void save_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace attnkit
