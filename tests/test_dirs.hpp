#pragma once
// Scratch directories for tests: TempDir()/<name>_<pid>, removed first, so a rerun starts clean.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>

namespace attnkit {

// The path of an empty (absent) scratch directory for `name` (unique per process).
inline std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  return d;
}

// An empty directory for the running test, TempDir()/<prefix>_<pid>_<test name>: created by the
// constructor, removed with everything in it by the destructor.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(test.begin(), test.end(), '/', '_');  // parametrized tests: "Name/0"
    dir_ = fresh_dir(prefix + "_" + test);
    std::filesystem::create_directories(dir_);
  }
  ~ScratchDir() { std::filesystem::remove_all(dir_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  // The path of `name` inside the directory.
  std::string path(std::string_view name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace attnkit
