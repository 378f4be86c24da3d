#pragma once
// Command-line plumbing shared by the training commands (train gpt|bert|cnn|vit|deformable,
// finetune bert): how --resume / --overwrite treat --out (flags.hpp has the common flags).
#include <cstdint>
#include <cstdio>
#include <string>

#include "attnkit/train/run_dir.hpp"

namespace attnkit::cli {

// --resume / --overwrite (they exclude each other) → how the run treats --out.
inline RunStart run_start(bool resume, bool overwrite) {
  return resume ? RunStart::kResume : overwrite ? RunStart::kOverwrite : RunStart::kNew;
}

// A finished run resumed again (start >= steps): prints "OUT is at step START of STEPS: nothing
// to train" on `to` (if `print`; steps_label precedes STEPS, e.g. "--steps ") and returns true.
inline bool nothing_to_train(const std::string& out, int64_t start, int64_t steps, bool print = true,
                             const char* steps_label = "--steps ", FILE* to = stdout) {
  if (start < steps) return false;
  if (print)
    std::fprintf(to, "%s is at step %lld of %s%lld: nothing to train\n", out.c_str(), (long long)start, steps_label,
                 (long long)steps);
  return true;
}

}  // namespace attnkit::cli
