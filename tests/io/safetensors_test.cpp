// Safetensors reader/writer on disk: round trips of every common dtype (rank 0, empty tensors,
// metadata, UTF-8 names), unaligned tensor data, atomic replacement when a write fails (before or
// in the middle of writing), and the `attnkit inspect` command's output and exit codes.
// Malformed-file rejection is in safetensors_malformed_test.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attnkit/core/error.hpp"
#include "attnkit/io/safetensors.hpp"
#include "test_dirs.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

namespace fs = std::filesystem;

template <class T>
std::span<const std::byte> byte_span(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const fs::path& p, std::string_view s) {
  std::ofstream out(p, std::ios::binary);
  out.write(s.data(), std::streamsize(s.size()));
}

// Each test gets a fresh directory, removed afterwards.
class SafetensorsIo : public ::testing::Test {
 protected:
  std::string path(std::string_view name) const { return scratch_.path(name); }
  // Names in the directory that look like our temp files.
  std::vector<std::string> temp_files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(scratch_.dir()))
      if (e.path().filename().string().find(".tmp.") != std::string::npos)
        out.push_back(e.path().filename().string());
    return out;
  }
  // Writes a small valid file (two tensors, one metadata entry) at `p`.
  static void save_small(const std::string& p) {
    static const std::vector<float> a = {1, 2, 3, 4, 5, 6};
    static const std::vector<int8_t> b = {-1, 2};
    const TensorToWrite ts[] = {{"alpha.weight", DType::f32, {2, 3}, byte_span(a)},
                                {"beta", DType::i8, {2}, byte_span(b)}};
    save_safetensors(p, ts, {{"format", "pt"}});
  }
  ScratchDir scratch_{"attnkit_st"};
};

TEST_F(SafetensorsIo, RoundTripsDtypesRankZeroEmptyAndMetadata) {
  const std::vector<float> f32 = {1.f, -2.5f, 3.25f, 1e-30f, -0.f, 7.f};        // [2, 3]
  const std::vector<float> f16_vals = {0.5f, -1.25f, 65504.f, 0x1p-24f};  // exact in f16
  const std::vector<float> bf16_vals = {1.5f, -0.0078125f, 3.f, -1e30f};  // last one rounds
  std::vector<uint16_t> f16, bf16;
  for (float v : f16_vals) f16.push_back(f32_to_f16(v));
  for (float v : bf16_vals) bf16.push_back(f32_to_bf16(v));
  const std::vector<int8_t> i8 = {-128, 0, 127, 5, 6};
  const std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max(), 0};
  const std::vector<float> scalar = {42.f};
  const std::vector<float> none;
  const std::vector<TensorToWrite> ts = {
      {"w.f32", DType::f32, {2, 3}, byte_span(f32)},
      {"h.f16", DType::f16, {4}, byte_span(f16)},
      {"b.bf16", DType::bf16, {2, 2}, byte_span(bf16)},
      {"q.i8", DType::i8, {5}, byte_span(i8)},
      {"idx.i64", DType::i64, {3, 1}, byte_span(i64)},
      {"scalar", DType::f32, {}, byte_span(scalar)},
      {"empty", DType::f32, {0, 3}, byte_span(none)},
      {"\xc3\xbc" "n" "\xc3\xaf" "c" "\xc3\xb6" "d" "\xe2\x9c\x93", DType::u8, {0}, byte_span(none)},  // "ünïcöd✓"
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "h\xc3\xa9llo"}};
  const std::string p = path("model.safetensors");
  save_safetensors(p, ts, meta);

  const SafetensorsFile f(p);
  EXPECT_EQ(f.source(), p);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.tensors().size(), ts.size());
  EXPECT_EQ((8 + f.header_size()) % 8, 0u) << "header must be padded to 8 bytes";
  EXPECT_EQ(f.file_size(), fs::file_size(p));
  for (const TensorToWrite& t : ts) {
    SCOPED_TRACE(t.name);
    const TensorInfo* info = f.find(t.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, t.dtype);
    EXPECT_EQ(info->shape, t.shape);
    const auto b = f.bytes(*info);
    ASSERT_EQ(b.size(), t.data.size());
    EXPECT_TRUE(std::equal(b.begin(), b.end(), t.data.begin()));
  }
  EXPECT_EQ(f.find("scalar")->numel(), 1);
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_EQ(f.read_f32("w.f32"), f32);
  EXPECT_EQ(f.read_f32("h.f16"), f16_vals);
  const std::vector<float> bf16_back = f.read_f32("b.bf16");
  for (size_t i = 0; i < bf16_vals.size(); ++i) EXPECT_EQ(bf16_back[i], bf16_to_f32(bf16[i]));
  EXPECT_EQ(bf16_back[0], 1.5f);
  EXPECT_EQ(f.read_f32("scalar"), scalar);
  EXPECT_TRUE(f.read_f32("empty").empty());
  // Hugging Face convention: the data section is ordered by tensor name.
  for (size_t i = 1; i < f.tensors().size(); ++i)
    EXPECT_LE(f.tensors()[i - 1].name, f.tensors()[i].name);
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_THROW(f.read_f32("nope"), Error);
  expect_error([&] { (void)f.read_f32("q.i8"); }, "read_f32 needs F32, F16 or BF16");
}

TEST_F(SafetensorsIo, ReadsUnalignedData) {
  // A 167-byte header (not padded): the data section starts at file offset 175, so no tensor is
  // 2- or 4-byte aligned in the page-aligned mapping; read_f32 must still decode exactly.
  std::string header =
      R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
      R"("b":{"dtype":"F16","shape":[2],"data_offsets":[12,16]},)"
      R"("c":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]}} )";
  ASSERT_EQ(header.size(), 167u);
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  file += header;
  const float a[3] = {1.5f, -3.f, 1e20f};
  const uint16_t b[2] = {f32_to_f16(0.25f), f32_to_f16(-6.f)};
  const uint16_t c[2] = {f32_to_bf16(2.f), f32_to_bf16(-0.5f)};
  file.append(reinterpret_cast<const char*>(a), 12);
  file.append(reinterpret_cast<const char*>(b), 4);
  file.append(reinterpret_cast<const char*>(c), 4);
  write_text(scratch_.dir() / "odd.safetensors", file);

  const SafetensorsFile f(path("odd.safetensors"));
  EXPECT_NE(reinterpret_cast<uintptr_t>(f.bytes(*f.find("a")).data()) % 4, 0u);
  EXPECT_NE(reinterpret_cast<uintptr_t>(f.bytes(*f.find("b")).data()) % 2, 0u);
  EXPECT_EQ(f.read_f32("a"), (std::vector<float>{1.5f, -3.f, 1e20f}));
  EXPECT_EQ(f.read_f32("b"), (std::vector<float>{0.25f, -6.f}));
  EXPECT_EQ(f.read_f32("c"), (std::vector<float>{2.f, -0.5f}));
}

TEST_F(SafetensorsIo, MoveTransfersTheMapping) {
  save_small(path("m.safetensors"));
  SafetensorsFile a(path("m.safetensors"));
  SafetensorsFile b(std::move(a));
  EXPECT_EQ(b.read_f32("alpha.weight").size(), 6u);
  SafetensorsFile c(path("m.safetensors"));
  c = std::move(b);  // c's own mapping is released, b's is taken over
  EXPECT_EQ(c.read_f32("alpha.weight")[5], 6.f);
  EXPECT_EQ(c.metadata().at("format"), "pt");
}

TEST_F(SafetensorsIo, OpenErrorsNameThePath) {
  const std::string missing = path("missing.safetensors");
  try {
    SafetensorsFile f(missing);
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(missing + ": cannot open", 0), 0u) << e.what();
  }
  expect_error([&] { SafetensorsFile f(scratch_.dir().string()); }, "not a regular file");
}

TEST_F(SafetensorsIo, SaveRejectsInconsistentTensors) {
  const std::vector<float> two = {1, 2};
  const std::string p = path("bad.safetensors");
  auto expect_save_error = [&](std::vector<TensorToWrite> ts, std::string_view phrase) {
    SCOPED_TRACE(phrase);
    expect_error([&] { save_safetensors(p, ts); }, phrase);
    EXPECT_FALSE(fs::exists(p));
    EXPECT_TRUE(temp_files().empty());
  };
  expect_save_error({{"a", DType::f32, {3}, byte_span(two)}}, "data holds 8 bytes but F32 x 3");
  expect_save_error({{"a", DType::f32, {2}, byte_span(two)}, {"a", DType::f32, {2}, byte_span(two)}},
                    "duplicate tensor name \"a\"");
  expect_save_error({{"", DType::f32, {2}, byte_span(two)}}, "empty tensor name");
  expect_save_error({{"__metadata__", DType::f32, {2}, byte_span(two)}}, "is reserved");
  expect_save_error({{"a", DType::f32, {-2}, byte_span(two)}}, "negative dimension -2");
  expect_save_error({{"a\xff", DType::f32, {2}, byte_span(two)}}, "not valid UTF-8");
}

TEST_F(SafetensorsIo, FailedSaveLeavesExistingFileIntact) {
  const std::string p = path("model.safetensors");
  save_small(p);
  ::chmod(p.c_str(), 0600);
  const std::string before = read_text(p);
  const std::vector<float> two = {1, 2};
  const TensorToWrite wrong[] = {{"x", DType::f32, {5}, byte_span(two)}};
  EXPECT_THROW(save_safetensors(p, wrong), Error);
  EXPECT_EQ(read_text(p), before);
  EXPECT_TRUE(temp_files().empty());

  // A successful save replaces the file and keeps its permission bits.
  const TensorToWrite good[] = {{"x", DType::f32, {2}, byte_span(two)}};
  save_safetensors(p, good);
  EXPECT_NE(read_text(p), before);
  EXPECT_EQ(SafetensorsFile(p).read_f32("x"), two);
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(SafetensorsIo, WriteFailureMidFileLeavesExistingFileIntact) {
  // RLIMIT_FSIZE makes write() fail with EFBIG after 64 KiB (SIGXFSZ ignored): a real I/O error
  // in the middle of the data section, after the temp file exists.
  const std::string p = path("model.safetensors");
  save_small(p);
  const std::string before = read_text(p);
  const std::vector<float> big(1 << 20, 0.5f);  // 4 MiB
  const TensorToWrite ts[] = {{"big", DType::f32, {1 << 20}, byte_span(big)}};
  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    save_safetensors(p, ts);
  } catch (const Error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("cannot write"), std::string::npos) << "message: " << message;
  EXPECT_EQ(read_text(p), before);
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(SafetensorsIo, SaveIntoMissingDirectoryFails) {
  const std::vector<float> two = {1, 2};
  const TensorToWrite ts[] = {{"x", DType::f32, {2}, byte_span(two)}};
  expect_error([&] { save_safetensors(path("no/such/dir/x.safetensors"), ts); },
               "cannot create temporary file");
}

// Runs `command`, returning its exit code (-1 if it did not exit normally).
int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(SafetensorsIo, CliInspectListsTensorsAndFailsCleanly) {
  const std::string cli = ATTNKIT_CLI_PATH;
  if (cli.empty()) GTEST_SKIP() << "configured without the CLI";
  ASSERT_TRUE(fs::exists(cli)) << cli << " missing: build the attnkit_cli target first";
  const std::string p = path("model.safetensors");
  save_small(p);
  const std::string out = path("out.txt"), err = path("err.txt");
  const std::string redirect = " >'" + out + "' 2>'" + err + "'";

  ASSERT_EQ(run("'" + cli + "' inspect '" + p + "'" + redirect), 0) << read_text(err);
  const std::string table = read_text(out);
  for (const char* s : {"alpha.weight", "beta", "F32", "I8", "[2, 3]", "format", "pt"})
    EXPECT_NE(table.find(s), std::string::npos) << s << " missing from:\n" << table;
  EXPECT_TRUE(read_text(err).empty());

  ASSERT_EQ(run("'" + cli + "' inspect --json '" + p + "'" + redirect), 0) << read_text(err);
  const auto j = nlohmann::json::parse(read_text(out));
  EXPECT_EQ(j.at("tensors").size(), 2u);
  EXPECT_EQ(j.at("totals").at("tensors"), 2);
  EXPECT_EQ(j.at("totals").at("parameters"), 8);
  EXPECT_EQ(j.at("totals").at("bytes"), 26);
  EXPECT_EQ(j.at("metadata").at("format"), "pt");

  const std::string whole = read_text(p);
  const std::string cut = path("truncated.safetensors");
  write_text(cut, std::string_view(whole).substr(0, whole.size() - 5));
  EXPECT_EQ(run("'" + cli + "' inspect '" + cut + "'" + redirect), 2);
  const std::string message = read_text(err);
  EXPECT_EQ(message.rfind("attnkit: error: ", 0), 0u) << message;
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 1) << message;
  EXPECT_NE(message.find(cut), std::string::npos) << message;
  EXPECT_TRUE(read_text(out).empty());
}

}  // namespace
}  // namespace attnkit
