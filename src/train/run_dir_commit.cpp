// Committing a checkpoint as a whole (see run_dir.hpp): files written into DIR/.ckpt-<step>.tmp/,
// manifest, fsync, rename to DIR/checkpoint-<step>/, atomic replacement of DIR/latest (the
// commit), relinking of the top-level model files, pruning of older checkpoints.
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/train/run_dir.hpp"
#include "run_dir_fs.hpp"

namespace attnkit {
namespace fs = std::filesystem;
using namespace run_dir_fs;

void kill_point_for_tests(int64_t step, std::string_view phase) {
  static const std::string spec = [] {
    const char* e = std::getenv("ATTNKIT_TEST_KILL_AT");
    return e ? std::string(e) : std::string();
  }();
  if (!spec.empty() && spec == std::to_string(step) + ":" + std::string(phase)) std::raise(SIGKILL);
}

std::string RunDir::begin_checkpoint(int64_t step) {
  check(writer_, "RunDir: only the writing process commits checkpoints");
  const std::string tmp = dir_ + "/" + std::string(kTempCheckpointPrefix) + std::to_string(step) + ".tmp";
  remove_path(tmp);
  std::error_code ec;
  fs::create_directories(tmp, ec);
  check(!ec, "checkpoint: cannot create ", tmp, ": ", ec.message());
  return tmp;
}

void RunDir::commit_checkpoint(int64_t step, uint64_t seed) {
  check(writer_, "RunDir: only the writing process commits checkpoints");
  const std::string tmp = dir_ + "/" + std::string(kTempCheckpointPrefix) + std::to_string(step) + ".tmp";
  const std::string name = std::string(kCheckpointPrefix) + std::to_string(step), final_dir = dir_ + "/" + name;
  CheckpointManifest m{.trainer = trainer_, .step = step, .seed = seed};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tmp, ec)) {
    check(e.is_regular_file(), "checkpoint: ", e.path().string(), " is not a regular file");
    const std::string file = e.path().filename().string();
    check(!is_temporary(file), "checkpoint: ", e.path().string(), " is a temporary file");
    m.files[file] = int64_t(e.file_size());
    sync_path(e.path().string(), false);
  }
  check(!ec, "checkpoint: cannot list ", tmp, ": ", ec.message());
  for (const char* need : {"config.json", "model.safetensors", kOptimizer})
    check(m.files.count(need) == 1, "checkpoint: ", tmp, " has no ", need);
  m.log_bytes = fs::exists(log_path(), ec) ? int64_t(fs::file_size(log_path(), ec)) : 0;
  nlohmann::ordered_json j;
  j["format"] = "attnkit-checkpoint";
  j["trainer"] = m.trainer;
  j["step"] = m.step;
  j["seed"] = m.seed;
  j["log_bytes"] = m.log_bytes;
  j["files"] = m.files;
  write_text_atomic(tmp + "/" + kManifest, j.dump(2) + "\n");
  sync_path(tmp, true);
  kill_point_for_tests(step, "rename");
  remove_path(final_dir);  // an uncommitted one from a killed run that reached the rename
  fs::rename(tmp, final_dir, ec);
  check(!ec, "checkpoint: cannot rename ", tmp, " to ", final_dir, ": ", ec.message());
  sync_path(dir_, true);
  kill_point_for_tests(step, "pointer");
  write_text_atomic(dir_ + "/" + kLatest, name + "\n");  // the commit
  checkpoint_ = final_dir;
  manifest_ = m;
  kill_point_for_tests(step, "publish");
  for (const auto& [file, size] : m.files)
    if (file != kOptimizer && file != kManifest) publish_file(final_dir, dir_, file);
  sync_path(dir_, true);
  kill_point_for_tests(step, "prune");
  std::vector<std::string> old;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string file = e.path().filename().string();
    if (checkpoint_step(file) && file != name) old.push_back(e.path().string());
  }
  check(!ec, "checkpoint: cannot list ", dir_, ": ", ec.message());
  for (const std::string& path : old) remove_path(path);
}

}  // namespace attnkit
