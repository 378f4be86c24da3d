#pragma once
// The training loop every trainer runs (GPT, BERT, the image models): resume from and checkpoints
// into the run directory (run_dir.hpp), global-norm gradient clipping, non-finite loss, gradient
// and parameter checks, the learning-rate schedule, log.csv, the progress line with its ETA, and
// the evaluation and checkpoint cadence. A model plugs in a TrainingTask: forward and backward on
// step s's batch, its evaluation, its log rows and progress text, and the files a checkpoint holds.
//
// Step s (0-based) runs: task.forward_backward(s) (in the options' matmul precision) → loss check → clip (norm check) → lr =
// task.learning_rate(s) → AdamW step → parameter check. After it, in order: evaluation (every
// eval_every steps, at the last step, and when the time budget stops the run; in the options'
// matmul precision too), the progress line,
// the log row, and a checkpoint (every checkpoint_every steps, at the last step, at a budget stop).
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>

#include "attnkit/core/weight_pack_cache.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "attnkit/train/adamw.hpp"
#include "attnkit/train/run_dir.hpp"

namespace attnkit {

// What one optimizer step did.
struct StepRecord {
  int64_t step = 0;            // the step's index (0-based)
  float loss = 0;              // the batch's mean loss
  double lr = 0;               // learning rate used
  double grad_norm = 0;        // global gradient norm before clipping
  double seconds = 0;          // wall time of the step (forward, backward, clipping, update)
  bool budget_reached = false; // the time budget ends the run after this step
};

struct TrainingLoopOptions {
  int64_t steps = 1;               // optimizer steps in total (a resumed run continues to this)
  int64_t eval_every = 0;          // steps between evaluations; 0 = only at the end
  int64_t checkpoint_every = 0;    // steps between checkpoints; 0 = only at the end
  double clip = 0;                 // global gradient-norm bound; 0 = off
  double max_seconds = 0;          // training-time budget (sum of step times); 0 = none
  uint64_t seed = 1;               // the run's seed, recorded in every checkpoint's manifest
  std::string out_dir;             // the run directory
  RunStart start = RunStart::kNew; // how run() treats out_dir unless resume() was called
  bool writer = true;              // this process writes log.csv and checkpoints
  bool collective_save = false;    // every process takes part in saving (tensor parallel)
  bool progress = true;            // progress lines on stderr (redrawn in place on a TTY)
  int64_t progress_every = 10;     // not a TTY: a line for steps s with s % progress_every == 0
  bool newline_after_eval = false; // on a TTY: end the progress line after each evaluation
  // The linear and convolution products of forward_backward and evaluate (the CLI's
  // --precision): f32, or the opt-in bf16 mixed precision (ops/matmul_precision.hpp; weights and
  // AdamW stay f32). bf16 needs gemm_bf16_available().
  MatmulPrecision precision = MatmulPrecision::kF32;
};

// The model-specific part of training.
class TrainingTask {
 public:
  virtual ~TrainingTask() = default;
  // "gpt", "bert" or "image": the checkpoint manifest's trainer (who may resume the run).
  virtual const char* trainer() const = 0;
  // The model's config.json text (resume compares it with the checkpoint's); empty: load checks.
  virtual std::string config_json() const = 0;
  // Forward and backward on step `step`'s batch, gradients left in gradients(); returns the mean
  // loss (backward may be skipped when it is not finite: the loop then stops the run).
  virtual float forward_backward(int64_t step) = 0;
  // The flat gradient and parameter buffers the optimizer updates.
  virtual std::span<float> gradients() = 0;
  virtual std::span<const float> parameters() = 0;
  // Scales the gradients to global norm <= clip (0: no scaling); returns the norm before.
  virtual double clip_gradients(double clip);
  // Learning rate of step `step`.
  virtual double learning_rate(int64_t step) const = 0;
  // Called after every step, before any evaluation (accumulate per-period statistics).
  virtual void after_step(const StepRecord&) {}
  // Runs the validation the cadence asks for; the task keeps its result for the log and progress.
  virtual void evaluate() = 0;
  // log.csv's header line (with its newline), and the rows of step r (none, one, or one per
  // evaluation period); `evaluated`: evaluate() ran after this step.
  virtual std::string log_header() const = 0;
  virtual void log_row(std::ostream& log, const StepRecord& r, bool evaluated) = 0;
  // The progress line of step r, without line ending; eta formatted by format_eta.
  virtual std::string progress_text(const StepRecord& r, int64_t steps, const std::string& eta,
                                    bool evaluated) const = 0;
  // Writes the model's files (config.json, model.safetensors, extras) into `dir`.
  virtual void save_model(const std::string& dir) = 0;
  // Loads the weights of checkpoint directory `dir` into the model.
  virtual void load_weights(const std::string& dir) = 0;
  // A checkpoint's files: by default save_model, the "model" kill point, optimizer.safetensors.
  virtual void save_checkpoint_files(AdamW& optimizer, const std::string& dir, int64_t step);
  // Resume: by default load_weights and the optimizer state.
  virtual void load_checkpoint(AdamW& optimizer, const std::string& dir);
};

// Remaining time as "<minutes>m<seconds>s" (e.g. 3m07s).
std::string format_eta(double seconds);

// True when a periodic action (evaluation, checkpoint) is due after `completed` of `total` steps.
bool due_after(int64_t completed, int64_t every, int64_t total);

class TrainingLoop {
 public:
  // Checks the options (steps >= 1, an output directory, a precision this process can run); the
  // optimizer updates task's parameters.
  TrainingLoop(TrainingTask& task, AdamW& optimizer, TrainingLoopOptions options);
  // Continues from out_dir's committed checkpoint (RunDir's refusal rules, config and seed
  // checks); returns the step to start at.
  int64_t resume();
  // One optimizer step; throws attnkit::Error ("training diverged at step s ...", the last
  // good checkpoint kept) on a non-finite loss, gradient norm or updated parameter.
  StepRecord step(int64_t step);
  // Steps from the current step to options.steps (or the time budget) with evaluations, log.csv,
  // progress and checkpoints; returns the last step's record.
  StepRecord run();
  // Commits a checkpoint of `completed` steps to the run directory as a whole.
  void save_checkpoint(int64_t completed);

  int64_t next_step() const { return next_step_; }
  double trained_seconds() const { return trained_seconds_; }
  const TrainingLoopOptions& options() const { return options_; }

 private:
  RunDir& run_dir();

  TrainingTask& task_;
  AdamW& optimizer_;
  TrainingLoopOptions options_;
  // Weights packed once per step: current only during forward_backward, emptied before the
  // optimizer writes the weights (weight_pack_cache.hpp).
  WeightPackCache packs_;
  std::optional<RunDir> run_;
  int64_t next_step_ = 0;
  double trained_seconds_ = 0;
};

}  // namespace attnkit
