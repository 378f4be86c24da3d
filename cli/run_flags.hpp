#pragma once
// Command-line plumbing shared by the training commands (train gpt|bert|cnn|vit|deformable,
// finetune bert): how --resume / --overwrite treat --out (flags.hpp has the common flags).
#include "attnkit/train/run_dir.hpp"

namespace attnkit::cli {

// --resume / --overwrite (they exclude each other) → how the run treats --out.
inline RunStart run_start(bool resume, bool overwrite) {
  return resume ? RunStart::kResume : overwrite ? RunStart::kOverwrite : RunStart::kNew;
}

}  // namespace attnkit::cli
