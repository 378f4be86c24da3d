#pragma once
// File-system steps of a run directory's commit protocol (run_dir.hpp): names of a run's files,
// durable atomic replacement (temporary, fsync, rename, fsync of the directory), and relinking
// a checkpoint's model files into the run directory.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace attnkit::run_dir_fs {

inline constexpr std::string_view kCheckpointPrefix = "checkpoint-";
inline constexpr std::string_view kTempCheckpointPrefix = ".ckpt-";
inline constexpr const char* kLatest = "latest";
inline constexpr const char* kManifest = "manifest.json";
inline constexpr const char* kOptimizer = "optimizer.safetensors";

// The step of a "checkpoint-<step>" name; nothing for any other name.
std::optional<int64_t> checkpoint_step(std::string_view name);
// A temporary a killed run can leave: ".ckpt-*" directories and any name containing ".tmp".
bool is_temporary(std::string_view name);
// A name a training run writes into its directory (model files, log, pointer, checkpoints,
// legacy optimizer state) or a temporary.
bool is_run_file(std::string_view name);

// fsync of a file or a directory; throws attnkit::Error naming the path.
void sync_path(const std::string& path, bool directory);
// Writes `text` to `path` durably and atomically (path.tmp, fsync, rename, fsync of the parent).
void write_text_atomic(const std::string& path, const std::string& text);
// Replaces dir/name by a hard link to (or, where links fail, a copy of) checkpoint/name, through
// a temporary and a rename: readers see the old or the new file, never a partial one.
void publish_file(const std::string& checkpoint, const std::string& dir, const std::string& name);
// Removes a file or a directory tree; throws attnkit::Error naming it on failure.
void remove_path(const std::string& path);

}  // namespace attnkit::run_dir_fs
