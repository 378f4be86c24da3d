// IDX reader: round trips of every element type (plain and gzip, files written by the test) and
// one test per class of malformed file, each required to fail with attnkit::Error carrying its
// own distinctive one-line message; the Fashion-MNIST loader on generated directories and, when
// Debian's dataset-fashion-mnist is installed, on the real test split.
#include <gtest/gtest.h>
#include <zlib.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/io/idx.hpp"
#include "test_dirs.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using Bytes = std::vector<std::byte>;

// IDX header for `type` and `dims` followed by `payload`.
Bytes idx_file(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes f = {std::byte{0}, std::byte{0}, std::byte{type}, std::byte(uint8_t(dims.size()))};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) f.push_back(std::byte((d >> s) & 0xff));
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

Bytes u8_payload(const std::vector<int>& v) {
  Bytes b;
  for (int x : v) b.push_back(std::byte(uint8_t(x)));
  return b;
}

// gzip-compressed copy of `raw` (zlib's deflate with the gzip wrapper).
Bytes gzip(const Bytes& raw) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  Bytes out(deflateBound(&zs, uLong(raw.size())) + 64);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(raw.data()));
  zs.avail_in = uInt(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// A scratch directory for the running test that `write`s byte files into it.
struct TempDir : ScratchDir {
  TempDir() : ScratchDir("attnkit_idx") {}
  std::string write(const std::string& name, const Bytes& b) const {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()),
                                             std::streamsize(b.size()));
    return p;
  }
  std::string str() const { return dir().string(); }
};

void expect_idx_rejected(const Bytes& file, const std::string& phrase) {
  for (bool compressed : {false, true}) {
    SCOPED_TRACE(compressed ? "gzip" : "plain");
    try {
      parse_idx(compressed ? gzip(file) : file, "f.idx");
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("f.idx: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(phrase), std::string::npos) << "message: " << msg << "\nwanted: " << phrase;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      continue;
    }
    ADD_FAILURE() << "accepted a malformed file; wanted an error containing: " << phrase;
  }
}

TEST(Idx, RoundTripEveryTypePlainAndGzip) {
  // i16 0x0102 = 258, i32 0x01020304, f32 1.5 = 0x3fc00000, f64 -2.0 = 0xc000000000000000.
  struct Case {
    uint8_t type;
    Bytes payload;
  } cases[] = {
      {0x08, u8_payload({0, 7, 255})},
      {0x09, u8_payload({0xff, 0x01, 0x80})},
      {0x0B, u8_payload({0x01, 0x02, 0xff, 0xfe, 0x00, 0x00})},
      {0x0C, u8_payload({0x01, 0x02, 0x03, 0x04, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})},
      {0x0D, u8_payload({0x3f, 0xc0, 0, 0, 0, 0, 0, 0, 0xbf, 0x80, 0, 0})},
      {0x0E, u8_payload({0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0})},
  };
  for (const auto& c : cases) {
    for (bool gz : {false, true}) {
      const Bytes f = idx_file(c.type, {1, 3}, c.payload);
      const IdxArray a = parse_idx(gz ? gzip(f) : f, "f");
      ASSERT_EQ(int(a.type), int(c.type));
      ASSERT_EQ(a.shape, (std::vector<int64_t>{1, 3}));
      ASSERT_EQ(a.numel(), 3);
      ASSERT_EQ(a.data.size(), 3 * idx_type_size(a.type));
      const void* p = a.data.data();
      switch (a.type) {
        case IdxType::u8: EXPECT_EQ(static_cast<const uint8_t*>(p)[1], 7); EXPECT_EQ(static_cast<const uint8_t*>(p)[2], 255); break;
        case IdxType::i8: EXPECT_EQ(static_cast<const int8_t*>(p)[0], -1); EXPECT_EQ(static_cast<const int8_t*>(p)[2], -128); break;
        case IdxType::i16: EXPECT_EQ(static_cast<const int16_t*>(p)[0], 258); EXPECT_EQ(static_cast<const int16_t*>(p)[1], -2); break;
        case IdxType::i32: EXPECT_EQ(static_cast<const int32_t*>(p)[0], 0x01020304); EXPECT_EQ(static_cast<const int32_t*>(p)[1], -1); break;
        case IdxType::f32: EXPECT_EQ(static_cast<const float*>(p)[0], 1.5f); EXPECT_EQ(static_cast<const float*>(p)[2], -1.0f); break;
        case IdxType::f64: EXPECT_EQ(static_cast<const double*>(p)[0], -2.0); EXPECT_EQ(static_cast<const double*>(p)[2], 1.0); break;
      }
    }
  }
}

TEST(Idx, EmptyArrayAndConcatenatedGzipMembersAreAccepted) {
  EXPECT_EQ(parse_idx(idx_file(0x08, {0, 28, 28}, {}), "f").numel(), 0);
  const Bytes f = idx_file(0x08, {4}, u8_payload({1, 2, 3, 4}));
  Bytes two = gzip(Bytes(f.begin(), f.begin() + 6));  // a member boundary inside the header
  const Bytes rest = gzip(Bytes(f.begin() + 6, f.end()));
  two.insert(two.end(), rest.begin(), rest.end());
  const IdxArray a = parse_idx(two, "f");
  EXPECT_EQ(a.shape, std::vector<int64_t>{4});
  EXPECT_EQ(uint8_t(a.data[3]), 4);
}

TEST(IdxMalformed, ShorterThanMagic) {
  expect_idx_rejected(u8_payload({0, 0, 8}), "shorter than the 4-byte IDX magic number");
}
TEST(IdxMalformed, NonZeroLeadingMagicBytes) {
  expect_idx_rejected(u8_payload({0, 1, 8, 1, 0, 0, 0, 0}), "bad IDX magic number");
}
TEST(IdxMalformed, UnknownTypeByte) {
  expect_idx_rejected(idx_file(0x0A, {1}, u8_payload({0, 0})), "unknown IDX type byte 0xa");
}
TEST(IdxMalformed, RankZeroAndTooLarge) {
  expect_idx_rejected(u8_payload({0, 0, 8, 0}), "IDX rank 0 outside [1, 8]");
  expect_idx_rejected(u8_payload({0, 0, 8, 9}), "IDX rank 9 outside [1, 8]");
}
TEST(IdxMalformed, HeaderShorterThanDimensions) {
  expect_idx_rejected(u8_payload({0, 0, 8, 3, 0, 0, 0, 1, 0, 0}), "header truncated: rank 3 needs 12 bytes");
}
TEST(IdxMalformed, DeclaredSizeTooLarge) {
  // 65536 · 65536 · 2 bytes of i16 = 2^33 bytes > kIdxMaxBytes; must fail before any allocation.
  expect_idx_rejected(idx_file(0x0B, {65536, 65536}, {}), "dimensions declare more than 4294967296 bytes");
  expect_idx_rejected(idx_file(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {}), "dimensions declare more than");
}
TEST(IdxMalformed, PayloadShorterThanDimensions) {
  expect_idx_rejected(idx_file(0x0C, {2, 2}, u8_payload({0, 0, 0, 1, 0, 0, 0, 2})),
                  "payload truncated: the header declares 16 bytes of i32 data, the file holds 8");
}
TEST(IdxMalformed, TrailingBytes) {
  expect_idx_rejected(idx_file(0x08, {2}, u8_payload({1, 2, 3})), "trailing bytes after the 2-byte payload");
}
TEST(IdxMalformed, CorruptGzip) {
  Bytes g = gzip(idx_file(0x08, {64}, Bytes(64, std::byte{7})));
  for (size_t i = 10; i < g.size() - 8; ++i) g[i] = std::byte{0xff};  // deflate data, not header
  expect_error([&] { parse_idx(g, "g"); }, "g: corrupt gzip stream");
}
TEST(IdxMalformed, TruncatedGzip) {
  const Bytes g = gzip(idx_file(0x08, {300}, Bytes(300, std::byte{3})));
  for (size_t cut : {g.size() - 4, g.size() / 2}) {  // inside the trailer; inside the data
    expect_error([&] { parse_idx(Bytes(g.begin(), g.begin() + std::ptrdiff_t(cut)), "g"); },
                 "g: truncated gzip stream");
  }
}
TEST(IdxMalformed, UnreadableFile) {
  try {
    read_idx("/nonexistent/attnkit/x.idx");
    ADD_FAILURE() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/attnkit/x.idx: cannot open for reading");
  }
}

// A generated MNIST-style directory with N images of 2×3 pixels.
struct FakeDataset {
  TempDir dir;
  FakeDataset(const std::vector<int>& labels, int images, bool gz, uint8_t label_type = 0x08,
              int image_rank = 3) {
    Bytes pix;
    for (int i = 0; i < images * 6; ++i) pix.push_back(std::byte(uint8_t(i)));
    const Bytes im = image_rank == 3 ? idx_file(0x08, {uint32_t(images), 2, 3}, pix)
                                     : idx_file(0x08, {uint32_t(images), 6}, pix);
    const size_t elem = label_type == 0x0C ? 4 : 1;  // the label payload is given as raw bytes
    const Bytes lb = idx_file(label_type, {uint32_t(labels.size() / elem)}, u8_payload(labels));
    const std::string sfx = gz ? ".gz" : "";
    dir.write("t10k-images-idx3-ubyte" + sfx, gz ? gzip(im) : im);
    dir.write("t10k-labels-idx1-ubyte" + sfx, gz ? gzip(lb) : lb);
  }
};

void expect_load_error(const FakeDataset& d, const std::string& phrase) {
  expect_error([&] { load_fashion_mnist(d.dir.str(), DatasetSplit::kTest); }, phrase);
}

TEST(IdxDataset, LoadsGeneratedSplitPlainAndGzip) {
  for (bool gz : {false, true}) {
    FakeDataset d({3, 9, 0}, 3, gz);
    const ImageDataset ds = load_fashion_mnist(d.dir.str(), DatasetSplit::kTest);
    EXPECT_EQ(ds.count, 3);
    EXPECT_EQ(ds.rows, 2);
    EXPECT_EQ(ds.cols, 3);
    EXPECT_EQ(ds.labels, (std::vector<uint8_t>{3, 9, 0}));
    ASSERT_EQ(ds.images.size(), 18u);
    EXPECT_EQ(ds.images[17], 17);
  }
}
TEST(IdxDataset, LabelOutOfRange) { expect_load_error(FakeDataset({3, 10, 0}, 3, true), "label 1 = 10 outside [0, 10)"); }
TEST(IdxDataset, CountMismatch) { expect_load_error(FakeDataset({1, 2}, 3, false), "holds 3 images but"); }
TEST(IdxDataset, LabelFileWrongType) {
  expect_load_error(FakeDataset({0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3}, 3, false, 0x0C),
                    "expected a label file of u8 [N], got i32");
}
TEST(IdxDataset, ImageFileWrongRank) {
  expect_load_error(FakeDataset({1, 2, 3}, 3, false, 0x08, 2), "expected an image file of u8 [N, rows, cols], got u8 with rank 2");
}
TEST(IdxDataset, MissingDirectoryAndBadSplit) {
  EXPECT_THROW(load_fashion_mnist("/nonexistent/attnkit", DatasetSplit::kTrain), Error);
  EXPECT_THROW(parse_dataset_split("validation"), Error);
  EXPECT_EQ(parse_dataset_split("test"), DatasetSplit::kTest);
}
TEST(IdxDataset, DebianFashionMnistTestSplit) {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const ImageDataset ds = load_fashion_mnist(kFashionMnistDir, DatasetSplit::kTest);
  EXPECT_EQ(ds.count, 10000);
  EXPECT_EQ(ds.rows, 28);
  EXPECT_EQ(ds.cols, 28);
  std::vector<int> per_class(10, 0);
  for (uint8_t l : ds.labels) ++per_class[l];
  for (int c : per_class) EXPECT_EQ(c, 1000);  // the test split is balanced
}

}  // namespace
}  // namespace attnkit
