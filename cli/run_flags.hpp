#pragma once
// Command-line plumbing shared by the training commands (train gpt|bert|cnn|vit|deformable,
// finetune bert): how --resume / --overwrite treat --out, and the range of --seed.
#include <CLI/CLI.hpp>
#include <string>

#include "attnkit/train/run_dir.hpp"

namespace attnkit::cli {

// --resume / --overwrite (they exclude each other) → how the run treats --out.
inline RunStart run_start(bool resume, bool overwrite) {
  return resume ? RunStart::kResume : overwrite ? RunStart::kOverwrite : RunStart::kNew;
}

// Validator of --seed: an integer >= 0 (the unsigned parse would turn "-1" into 2^64 - 1).
inline CLI::Validator non_negative_seed() {
  return CLI::Validator(
      [](std::string& s) {
        const size_t first = s.find_first_not_of(" \t");
        return first != std::string::npos && s[first] == '-' ? "must be an integer >= 0, got " + s : std::string();
      },
      "SEED >= 0");
}

}  // namespace attnkit::cli
