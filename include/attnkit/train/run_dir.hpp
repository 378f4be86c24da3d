#pragma once
// A training run directory as one unit, shared by the GPT, BERT and image trainers.
//
// Layout of DIR (the trainer's --out):
//   latest                     one line "checkpoint-<step>": the committed checkpoint
//   checkpoint-<step>/         model files, optimizer.safetensors, manifest.json (step, seed,
//                              trainer, file sizes, length of log.csv at the commit)
//   config.json, model.safetensors, preprocessor_config.json
//                              the latest checkpoint's model files (hard links), so that every
//                              command that loads a model directory loads a run directory
//   log.csv                    one row per step (or epoch), cut back to the checkpoint on resume
//
// A checkpoint is written into DIR/.ckpt-<step>.tmp/, synced, renamed to DIR/checkpoint-<step>/,
// then DIR/latest is replaced atomically (temporary file, fsync, rename, fsync of DIR): that
// rename is the commit. The top-level model files are then relinked and older checkpoints
// removed. A kill at any point leaves either the previous or the new checkpoint committed, and
// the next start (resume or overwrite) removes what the killed run left half-done.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace attnkit {

// How a training command treats its output directory.
enum class RunStart {
  kNew,        // DIR must not hold a run (absent, empty, or only unrelated files)
  kResume,     // DIR must hold a committed, consistent checkpoint
  kOverwrite,  // DIR's run files (never other files) are removed before training
};

// DIR/checkpoint-<step>/manifest.json.
struct CheckpointManifest {
  std::string trainer;                   // "gpt", "bert" or "image": who can resume it
  int64_t step = 0;                      // optimizer steps completed
  uint64_t seed = 0;                     // the run's seed (data order, masking, augmentation)
  int64_t log_bytes = 0;                 // length of DIR/log.csv at the commit
  std::map<std::string, int64_t> files;  // file in the checkpoint → size in bytes
};

class RunDir {
 public:
  // Checks `dir` for a run started as `start` by `trainer`, reading but never writing: kNew
  // refuses a directory that holds a run, kResume one without a complete committed checkpoint
  // of this trainer, and a writer (the process that writes checkpoints) needs a writable
  // directory or a creatable path. Throws attnkit::Error naming the directory and the flags.
  RunDir(std::string dir, RunStart start, std::string trainer, bool writer = true);

  // Makes DIR ready (writer only; other processes return at once): creates it; kOverwrite
  // removes the old run's files; kResume removes temporaries and uncommitted checkpoints of a
  // killed run, relinks the top-level model files to the committed checkpoint and cuts log.csv
  // back to its length at the commit. Call after every other check of the run has passed.
  void prepare();

  // Throws unless `input` (a path the run reads, given as `flag`) lies outside DIR: a run writes
  // and --overwrite removes its files there, so an input inside it could be overwritten.
  void check_input_outside(const std::string& input, const char* flag) const;

  const std::string& path() const { return dir_; }
  RunStart start() const { return start_; }
  // DIR/log.csv.
  std::string log_path() const { return dir_ + "/log.csv"; }

  // kResume: the committed checkpoint's directory, manifest and config.json text.
  const std::string& checkpoint_path() const { return checkpoint_; }
  const CheckpointManifest& manifest() const { return manifest_; }
  std::string checkpoint_config() const;
  // kResume: throws unless `config_json` (the model about to be resumed, or the one the command
  // line describes) equals the checkpoint's config.json as JSON, naming the keys that differ and
  // `flags` (the flags to omit when resuming).
  void check_config(const std::string& config_json, const char* flags = "--preset/--config") const;
  // kResume: throws unless the loaded optimizer state's step and the run's seed match the
  // manifest.
  void check_resumed(int64_t optimizer_step, uint64_t seed) const;

  // Writer: an empty DIR/.ckpt-<step>.tmp/ for the trainer to write the checkpoint's files into
  // (config.json, model.safetensors, optimizer.safetensors, any others to publish).
  std::string begin_checkpoint(int64_t step);
  // Writer: commits what begin_checkpoint's directory holds as checkpoint `step` (manifest,
  // fsync, rename, pointer), then relinks the top-level model files and prunes older
  // checkpoints. The caller flushes log.csv first (its length goes into the manifest).
  void commit_checkpoint(int64_t step, uint64_t seed);

 private:
  std::string dir_, trainer_, checkpoint_;
  RunStart start_;
  bool writer_;
  CheckpointManifest manifest_;
};

// What a trainer resumes: its model's config, and how to load weights and optimizer state.
struct ResumeTarget {
  std::string config_json;  // the model's config.json text; empty: `load` checks it (TP shards)
  // Loads weights and optimizer state from the checkpoint directory; returns the optimizer's step.
  std::function<int64_t(const std::string& checkpoint)> load;
  uint64_t seed = 0;        // the run's seed as given now
};

// Resumes `trainer`'s run in `dir`: opens the committed checkpoint (refusal rules), checks the
// config, loads (errors prefixed "--resume: <checkpoint>: "), checks the optimizer's step and the
// seed against the manifest and only then prepare()s the directory. Returns the open RunDir.
RunDir resume_run(const std::string& dir, const std::string& trainer, bool writer, const ResumeTarget& target);

// The trainer's open run directory: `run` if set, else a new one (dir, start) prepared now.
RunDir& open_run(std::optional<RunDir>& run, const std::string& dir, RunStart start, const std::string& trainer,
                 bool writer = true);

// The files of a run directory that a new run would replace (log.csv, latest, checkpoints, model
// files, temporaries); empty if `dir` holds no run.
std::string run_files_in(const std::string& dir);

// Test hook for kill tests: if the environment variable ATTNKIT_TEST_KILL_AT is
// "<step>:<phase>", the process raises SIGKILL when it reaches that phase of that step's
// checkpoint (phases: model, rename, pointer, publish, prune; see docs/reliability.md).
void kill_point_for_tests(int64_t step, std::string_view phase);

}  // namespace attnkit
