#pragma once
// Scratch directories for tests: TempDir()/<name>_<pid>, removed first, so a rerun starts clean.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace attnkit {

// The path of an empty (absent) scratch directory for `name` (unique per process).
inline std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  return d;
}

}  // namespace attnkit
