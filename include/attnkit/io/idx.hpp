#pragma once
// IDX files (LeCun's MNIST format, also Fashion-MNIST), optionally gzip-compressed.
//
// Layout (all integers big-endian): [0x00][0x00][type byte][rank r][r × u32 dimensions][data],
// data row-major with the element type of the type byte: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32,
// 0x0D f32, 0x0E f64. A file that starts with the gzip magic (1f 8b) is inflated first (zlib).
// Python equivalent: numpy.frombuffer(gzip.open(path).read(), offset=4 + 4·r) reshaped.
//
// Reading validates everything before returning and throws attnkit::Error, prefixed with the
// file's name, for: an unreadable file, a corrupt or truncated gzip stream, a file shorter than
// the 4-byte magic, non-zero leading magic bytes, an unknown type byte, rank 0, a header shorter
// than its dimensions, an element count whose byte size overflows or exceeds kIdxMaxBytes, a
// payload shorter than the dimensions imply, and bytes after the payload. The data set loader
// adds: image files that are not u8 [N, rows, cols], label files that are not u8 [N], labels
// outside [0, classes) and image/label counts that differ.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace attnkit {

// IDX element types, valued as their type byte.
enum class IdxType : uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E };

// Bytes per element of an IDX type.
size_t idx_type_size(IdxType t);
// Lower-case name of an IDX type ("u8", "i16", "f32", ...).
const char* idx_type_name(IdxType t);

// Largest payload accepted, in bytes (decompressed): 4 GiB, far above any MNIST-style file.
inline constexpr uint64_t kIdxMaxBytes = uint64_t(1) << 32;

// A decoded IDX array: its type, its dimensions (outermost first) and its elements, converted
// to the host's byte order, row-major.
struct IdxArray {
  IdxType type = IdxType::u8;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;  // numel() × idx_type_size(type) bytes, host byte order

  // Product of the dimensions.
  int64_t numel() const;
};

// Decodes an IDX file held in memory (gzip-compressed or plain); `name` prefixes error messages.
IdxArray parse_idx(std::span<const std::byte> file, const std::string& name);
// Reads and decodes the IDX file at `path` (gzip-compressed or plain).
IdxArray read_idx(const std::string& path);

// Which half of an MNIST-style data set: the training files ("train-*") or the test files
// ("t10k-*").
enum class DatasetSplit { kTrain, kTest };
// "train" or "test" → DatasetSplit; throws attnkit::Error naming `split` otherwise.
DatasetSplit parse_dataset_split(const std::string& split);

// Where Debian's dataset-fashion-mnist package installs the four files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Grey-scale images with integer class labels, as stored in the files (no normalisation).
struct ImageDataset {
  int64_t count = 0, rows = 0, cols = 0;  // N images of rows × cols pixels
  std::vector<uint8_t> images;            // [N, rows, cols], 0 = background
  std::vector<uint8_t> labels;            // [N], each in [0, classes)
  int classes = 10;
};

// Pairs an image file (u8 [N, rows, cols]) with a label file (u8 [N], labels < classes) and
// validates them against each other.
ImageDataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                              int classes = 10);
// Loads a split of an MNIST-style directory: {train,t10k}-{images-idx3,labels-idx1}-ubyte, each
// with or without a .gz suffix (the .gz file is preferred when both exist). MNIST itself has the
// same names, so `dir` may hold either data set.
ImageDataset load_fashion_mnist(const std::string& dir = kFashionMnistDir,
                                DatasetSplit split = DatasetSplit::kTrain);

}  // namespace attnkit
