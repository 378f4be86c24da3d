// MNIST-style data sets from a pair of IDX files (see idx.hpp): images u8 [N, rows, cols] and
// labels u8 [N], validated against each other.
#include <filesystem>

#include "attnkit/core/error.hpp"
#include "attnkit/io/idx.hpp"

namespace attnkit {
namespace {

std::vector<uint8_t> bytes_of(const IdxArray& a) {
  std::vector<uint8_t> v(a.data.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(a.data[i]);
  return v;
}

// `stem` with a .gz suffix if that file exists, else `stem` itself.
std::string pick(const std::filesystem::path& dir, const std::string& stem) {
  const auto gz = dir / (stem + ".gz");
  std::error_code ec;
  return std::filesystem::exists(gz, ec) ? gz.string() : (dir / stem).string();
}

}  // namespace

DatasetSplit parse_dataset_split(const std::string& split) {
  if (split == "train") return DatasetSplit::kTrain;
  if (split == "test") return DatasetSplit::kTest;
  fail("split: expected 'train' or 'test', got '", split, "'");
}

ImageDataset load_idx_dataset(const std::string& images_path, const std::string& labels_path,
                              int classes) {
  check(classes >= 1 && classes <= 256, "classes: expected 1..256, got ", classes);
  const IdxArray im = read_idx(images_path);
  check(im.type == IdxType::u8 && im.shape.size() == 3, images_path,
        ": expected an image file of u8 [N, rows, cols], got ", idx_type_name(im.type), " with rank ",
        im.shape.size());
  const IdxArray lb = read_idx(labels_path);
  check(lb.type == IdxType::u8 && lb.shape.size() == 1, labels_path,
        ": expected a label file of u8 [N], got ", idx_type_name(lb.type), " with rank ",
        lb.shape.size());
  check(im.shape[0] == lb.shape[0], images_path, " holds ", im.shape[0], " images but ",
        labels_path, " holds ", lb.shape[0], " labels");
  ImageDataset ds;
  ds.count = im.shape[0];
  ds.rows = im.shape[1];
  ds.cols = im.shape[2];
  ds.classes = classes;
  ds.images = bytes_of(im);
  ds.labels = bytes_of(lb);
  for (size_t i = 0; i < ds.labels.size(); ++i)
    check(ds.labels[i] < classes, labels_path, ": label ", i, " = ", int(ds.labels[i]),
          " outside [0, ", classes, ")");
  return ds;
}

ImageDataset load_fashion_mnist(const std::string& dir, DatasetSplit split) {
  const std::string prefix = split == DatasetSplit::kTrain ? "train" : "t10k";
  const std::filesystem::path d(dir);
  std::error_code ec;
  check(std::filesystem::is_directory(d, ec), "data dir: '", dir,
        "' is not a directory (Debian: apt-get install dataset-fashion-mnist)");
  return load_idx_dataset(pick(d, prefix + "-images-idx3-ubyte"),
                          pick(d, prefix + "-labels-idx1-ubyte"));
}

}  // namespace attnkit
