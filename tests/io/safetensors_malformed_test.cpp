// Safetensors validation: one test per class of malformed file, each built byte by byte and
// required to fail with attnkit::Error carrying its own distinctive, one-line message; plus the
// edge cases that must be accepted (rank 0, empty tensors, padding, no tensors).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "attnkit/core/error.hpp"
#include "attnkit/io/safetensors.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

// 8-byte little-endian length (the header's size unless `declared` is given), header, data.
std::vector<std::byte> make_file(std::string_view header, size_t data_len = 0,
                                 std::optional<uint64_t> declared = std::nullopt) {
  const uint64_t n = declared.value_or(header.size());
  std::vector<std::byte> out;
  for (int i = 0; i < 8; ++i) out.push_back(std::byte((n >> (8 * i)) & 0xff));
  for (char c : header) out.push_back(std::byte(c));
  out.resize(out.size() + data_len, std::byte{0x5a});
  return out;
}

// One F32 entry named `name` with the given shape and offsets, as header JSON text.
std::string f32_entry(std::string_view name, std::string_view shape, uint64_t begin, uint64_t end) {
  return "\"" + std::string(name) + R"(":{"dtype":"F32","shape":)" + std::string(shape) +
         R"(,"data_offsets":[)" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

void expect_rejected(const std::vector<std::byte>& file, std::string_view phrase) {
  try {
    SafetensorsFile::parse(file, "buf");
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("buf: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(phrase), std::string::npos) << "message: " << msg << "\nwanted: " << phrase;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
    return;
  }
  ADD_FAILURE() << "accepted a malformed file; wanted an error containing: " << phrase;
}
#define EXPECT_REJECTED(file, phrase) \
  do {                                \
    SCOPED_TRACE(phrase);             \
    expect_rejected(file, phrase);    \
  } while (0)

TEST(SafetensorsMalformed, FileShorterThanLengthPrefix) {
  for (size_t n : {0, 1, 7}) {
    std::vector<std::byte> file(n, std::byte{0});
    EXPECT_REJECTED(file, "is " + std::to_string(n) + " bytes, shorter than the 8-byte header length prefix");
  }
}

TEST(SafetensorsMalformed, HeaderLengthPastEndOfFile) {
  EXPECT_REJECTED(make_file("{}", 10, 9999999999ull), "header length 9999999999 exceeds file size 20");
  EXPECT_REJECTED(make_file("{}", 0, 3), "header length 3 exceeds file size 10");
  // 2^64 - 1: the bound must be checked without computing 8 + n.
  EXPECT_REJECTED(make_file("{}", 0, ~0ull), "header length 18446744073709551615 exceeds file size 10");
}

TEST(SafetensorsMalformed, HeaderLengthOverLimit) {
  // 100 MB + 8 of lazily zeroed anonymous memory: only the prefix is ever touched.
  const size_t n = 100'000'016;
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* bytes = static_cast<std::byte*>(p);
  const uint64_t declared = 100'000'001;
  for (int i = 0; i < 8; ++i) bytes[i] = std::byte((declared >> (8 * i)) & 0xff);
  expect_error([&] { SafetensorsFile::parse({bytes, n}, "big"); },
               "header length 100000001 exceeds the limit of 100000000");
  ::munmap(p, n);
}

TEST(SafetensorsMalformed, HeaderNotUtf8) {
  EXPECT_REJECTED(make_file("{\"a\xff\":1}"), "header is not valid UTF-8 (bad byte at header offset 3)");
  EXPECT_REJECTED(make_file("{\"\xc0\xaf\":1}"), "not valid UTF-8");      // overlong '/'
  EXPECT_REJECTED(make_file("{\"\xed\xa0\x80\":1}"), "not valid UTF-8");  // surrogate U+D800
  EXPECT_REJECTED(make_file("{\"\xf4\x90\x80\x80\":1}"), "not valid UTF-8");  // > U+10FFFF
  EXPECT_REJECTED(make_file("{\"\xe2\x9c\"}"), "not valid UTF-8");        // truncated sequence
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  EXPECT_REJECTED(make_file(R"({"a":)"), "header is not valid JSON");
  EXPECT_REJECTED(make_file(""), "header is not valid JSON");
  EXPECT_REJECTED(make_file(R"({"a":1e999})"), "header is not valid JSON");
  EXPECT_REJECTED(make_file(std::string(100, '[') + std::string(100, ']')), "nests deeper than 64");
}

TEST(SafetensorsMalformed, HeaderNotObject) {
  EXPECT_REJECTED(make_file("[1,2]"), "header is not a JSON object (it is array)");
  EXPECT_REJECTED(make_file("\"x\"  "), "header is not a JSON object (it is string)");
}

TEST(SafetensorsMalformed, DuplicateTensorName) {
  const std::string e = f32_entry("w", "[1]", 0, 4);
  EXPECT_REJECTED(make_file("{" + e + "," + f32_entry("w", "[1]", 4, 8) + "}", 8),
                  "duplicate tensor name \"w\"");
  EXPECT_REJECTED(make_file(R"({"w":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}})", 4),
                  "duplicate key \"dtype\" in header entry \"w\"");
  EXPECT_REJECTED(make_file(R"({"__metadata__":{},"__metadata__":{}})"), "duplicate __metadata__");
}

TEST(SafetensorsMalformed, MetadataNotStringMap) {
  EXPECT_REJECTED(make_file(R"({"__metadata__":["a"]})"), "__metadata__ is not a JSON object");
  EXPECT_REJECTED(make_file(R"({"__metadata__":{"k":1}})"), "__metadata__ value for key \"k\" is not a string");
  EXPECT_REJECTED(make_file(R"({"__metadata__":{"k":{"x":"y"}}})"), "value for key \"k\" is not a string");
}

TEST(SafetensorsMalformed, EntryNotObject) {
  EXPECT_REJECTED(make_file(R"({"w":[1,2]})"), "tensor \"w\": entry is not a JSON object");
  EXPECT_REJECTED(make_file(R"({"w":null})"), "tensor \"w\": entry is not a JSON object");
}

TEST(SafetensorsMalformed, EntryMissingField) {
  EXPECT_REJECTED(make_file(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4), "tensor \"w\": missing \"dtype\"");
  EXPECT_REJECTED(make_file(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4), "missing \"shape\"");
  EXPECT_REJECTED(make_file(R"({"w":{"dtype":"F32","shape":[1]}})", 4), "missing \"data_offsets\"");
}

TEST(SafetensorsMalformed, EntryWrongJsonTypes) {
  EXPECT_REJECTED(make_file(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4), "dtype is not a string");
  EXPECT_REJECTED(make_file(R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", 4), "shape is not a JSON array");
  EXPECT_REJECTED(make_file(R"({"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4),
                  "shape[0] is not an integer");
  EXPECT_REJECTED(make_file(R"({"w":{"dtype":"F32","shape":[true],"data_offsets":[0,4]}})", 4),
                  "shape[0] is not an integer");
  for (const char* offsets : {"[0]", "[0,4,8]", "\"0,4\"", "[0,4.0]", "[-1,3]", "[0,null]"})
    EXPECT_REJECTED(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":)" + std::string(offsets) + "}}", 4),
                    "data_offsets is not [begin, end] with two non-negative integers");
}

TEST(SafetensorsMalformed, NegativeDimension) {
  EXPECT_REJECTED(make_file("{" + f32_entry("w", "[2,-3]", 0, 0) + "}"), "negative dimension -3 in shape[1]");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  EXPECT_REJECTED(make_file(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", 16),
                  "unknown dtype \"F128\"");
  EXPECT_REJECTED(make_file(R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4), "unknown dtype \"f32\"");
}

TEST(SafetensorsMalformed, ElementCountOverflow) {
  EXPECT_REJECTED(make_file("{" + f32_entry("w", "[4294967296,4294967296]", 0, 0) + "}"),
                  "element count of shape overflows 64 bits");
  // A zero dimension does not excuse an overflowing product of the others.
  EXPECT_REJECTED(make_file("{" + f32_entry("w", "[4294967296,4294967296,0]", 0, 0) + "}"),
                  "element count of shape overflows 64 bits");
  EXPECT_REJECTED(make_file("{" + f32_entry("w", "[18446744073709551615]", 0, 0) + "}"),
                  "shape[0] = 18446744073709551615 exceeds the largest dimension");
}

TEST(SafetensorsMalformed, ByteSizeOverflow) {
  EXPECT_REJECTED(make_file(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
                  "byte size 4611686018427387904 x 8 overflows 64 bits");
}

TEST(SafetensorsMalformed, OffsetsEndBeforeBegin) {
  EXPECT_REJECTED(make_file("{" + f32_entry("w", "[1]", 8, 4) + "}", 8), "data_offsets end 4 < begin 8");
}

TEST(SafetensorsMalformed, RangeLengthMismatch) {
  EXPECT_REJECTED(make_file("{" + f32_entry("w", "[2]", 0, 4) + "}", 4),
                  "byte range [0, 4) holds 4 bytes but F32 x 2 elements needs 8");
  EXPECT_REJECTED(make_file("{" + f32_entry("w", "[]", 0, 0) + "}"), "holds 0 bytes but F32 x 1 elements needs 4");
}

TEST(SafetensorsMalformed, RangeOutOfBounds) {
  EXPECT_REJECTED(make_file("{" + f32_entry("w", "[2]", 8, 16) + "}", 8),
                  "byte range [8, 16) is out of bounds of the 8-byte data section");
  // Near 2^64: offsets must be compared, never added to the data start.
  EXPECT_REJECTED(make_file("{" + f32_entry("w", "[2]", 18446744073709551607ull, 18446744073709551615ull) + "}", 8),
                  "is out of bounds");
}

TEST(SafetensorsMalformed, OverlappingRanges) {
  EXPECT_REJECTED(make_file("{" + f32_entry("a", "[2]", 0, 8) + "," + f32_entry("b", "[2]", 4, 12) + "}", 12),
                  "tensors \"a\" [0, 8) and \"b\" [4, 12) overlap");
  EXPECT_REJECTED(make_file("{" + f32_entry("a", "[2]", 0, 8) + "," + f32_entry("b", "[2]", 0, 8) + "}", 8),
                  "overlap");
  // An empty tensor placed strictly inside another one.
  EXPECT_REJECTED(make_file("{" + f32_entry("a", "[2]", 0, 8) + "," + f32_entry("e", "[0]", 4, 4) + "}", 8),
                  "overlap");
}

TEST(SafetensorsMalformed, GapBetweenRanges) {
  EXPECT_REJECTED(make_file("{" + f32_entry("a", "[1]", 0, 4) + "," + f32_entry("b", "[1]", 8, 12) + "}", 12),
                  "gap of 4 bytes in the data section at offset 4 (before tensor \"b\")");
  EXPECT_REJECTED(make_file("{" + f32_entry("a", "[1]", 4, 8) + "}", 8), "gap of 4 bytes in the data section at offset 0");
}

TEST(SafetensorsMalformed, TrailingBytes) {
  EXPECT_REJECTED(make_file("{" + f32_entry("a", "[1]", 0, 4) + "}", 7),
                  "3 trailing bytes in the data section after the last tensor (tensors cover 4 of 7 bytes)");
  EXPECT_REJECTED(make_file("{}", 1), "1 trailing bytes");
}

TEST(SafetensorsMalformed, EmptyTensorName) {
  EXPECT_REJECTED(make_file("{" + f32_entry("", "[1]", 0, 4) + "}", 4), "empty tensor name");
}

TEST(SafetensorsMalformed, HostileNamesStayOneLineAndShort) {
  const std::string name = "x\\n\\u001b[31m" + std::string(500, 'y');
  try {
    SafetensorsFile::parse(make_file("{" + f32_entry(name, "[1]", 0, 8) + "}", 8), "buf");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos);
    EXPECT_EQ(msg.find('\x1b'), std::string::npos);
    EXPECT_NE(msg.find("x\\x0a\\x1b[31m"), std::string::npos) << msg;
    EXPECT_LT(msg.size(), 400u) << msg;
  }
}

TEST(SafetensorsMalformed, FileErrorsArePrefixedWithPath) {
  const std::string p = (std::filesystem::temp_directory_path() /
                         ("attnkit_st_prefix_" + std::to_string(::getpid()) + ".safetensors")).string();
  const auto bytes = make_file("{}", 3);
  FILE* f = std::fopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  try {
    SafetensorsFile s(p);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(p + ": 3 trailing bytes", 0), 0u) << e.what();
  }
  std::filesystem::remove(p);
}

TEST(SafetensorsMalformed, AcceptsEdgeCases) {
  // No tensors at all; header padded with trailing spaces; rank 0; empty tensors at boundaries.
  EXPECT_TRUE(SafetensorsFile::parse(make_file("{}")).tensors().empty());
  const auto padded = make_file("{" + f32_entry("s", "[]", 0, 4) + "}        ", 4);
  EXPECT_EQ(SafetensorsFile::parse(padded).find("s")->numel(), 1);
  const auto empties = make_file("{" + f32_entry("e0", "[0,5]", 0, 0) + "," + f32_entry("a", "[1]", 0, 4) + "," +
                                 f32_entry("e1", "[3,0]", 4, 4) + "," + f32_entry("e2", "[0]", 4, 4) + "}", 4);
  const SafetensorsFile f = SafetensorsFile::parse(empties);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensors()[0].name, "e0");  // sorted by offset, empty before non-empty
  EXPECT_EQ(f.find("e1")->shape, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(f.bytes(*f.find("a")).size(), 4u);
  EXPECT_EQ(f.data_size(), 4u);
}

}  // namespace
}  // namespace attnkit
