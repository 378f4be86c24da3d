// The shared training loop (see training_loop.hpp): step, checks, cadence, log, progress, checkpoints.
#include "attnkit/train/training_loop.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

#include "attnkit/core/clock.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/nn/parallel_blocks.hpp"  // first_non_finite
#include "attnkit/ops/gemm_bf16.hpp"
#include "attnkit/train/grad_clip.hpp"

namespace attnkit {

double TrainingTask::clip_gradients(double clip) {
  const std::span<float> grads[] = {gradients()};
  if (clip > 0) return clip_grad_norm(grads, clip);
  const std::span<const float> view[] = {gradients()};
  return global_grad_norm(view);
}

void TrainingTask::save_checkpoint_files(AdamW& optimizer, const std::string& dir, int64_t step) {
  save_model(dir);
  kill_point_for_tests(step, "model");
  optimizer.save_state(dir + "/optimizer.safetensors");
}

void TrainingTask::load_checkpoint(AdamW& optimizer, const std::string& dir) {
  load_weights(dir);
  optimizer.load_state(dir + "/optimizer.safetensors");
}

std::string format_eta(double seconds) {
  const int64_t s = std::isfinite(seconds) && seconds > 0 ? int64_t(seconds) : 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  return buf;
}

bool due_after(int64_t completed, int64_t every, int64_t total) {
  return (every > 0 && completed % every == 0) || completed == total;
}

TrainingLoop::TrainingLoop(TrainingTask& task, AdamW& optimizer, TrainingLoopOptions options)
    : task_(task), optimizer_(optimizer), options_(std::move(options)) {
  check(options_.steps >= 1, "--steps: must be >= 1");
  check(!options_.out_dir.empty(), "--out: a directory is required");
  check(options_.progress_every >= 1, "progress_every: must be >= 1");
  check(options_.precision != MatmulPrecision::kBf16 || gemm_bf16_available(), "--precision bf16: ",
        gemm_bf16_unavailable_reason());
}

int64_t TrainingLoop::resume() {
  run_.emplace(resume_run(options_.out_dir, task_.trainer(), options_.writer,
                          {.config_json = task_.config_json(),
                           .load = [&](const std::string& ckpt) {
                             task_.load_checkpoint(optimizer_, ckpt);
                             return optimizer_.step_count();
                           },
                           .seed = options_.seed}));
  return next_step_ = optimizer_.step_count();
}

RunDir& TrainingLoop::run_dir() {
  return open_run(run_, options_.out_dir, options_.start, task_.trainer(), options_.writer);
}

StepRecord TrainingLoop::step(int64_t s) {
  const double t0 = now_seconds();
  StepRecord r;
  r.step = s;
  {
    const WeightPackScope packs(packs_);  // ends (and empties the cache) before the update
    const MatmulPrecisionScope precision(options_.precision);
    r.loss = task_.forward_backward(s);
  }
  // The divergence messages end with kKept, options_.out_dir, kKeptEnd (assembled only on failure).
  constexpr const char* kKept = "; the last good checkpoint in ";
  constexpr const char* kKeptEnd = " is kept";
  check(std::isfinite(r.loss), "training diverged at step ", s, ": loss = ", r.loss, kKept, options_.out_dir,
        kKeptEnd);
  r.grad_norm = task_.clip_gradients(options_.clip);
  check(std::isfinite(r.grad_norm), "training diverged at step ", s, ": gradient norm = ", r.grad_norm, kKept,
        options_.out_dir, kKeptEnd);
  r.lr = task_.learning_rate(s);
  optimizer_.step(r.lr);
  // An update can overflow even from a finite loss and gradient.
  const std::span<const float> params = task_.parameters();
  if (const int64_t bad = nn::first_non_finite(params); bad >= 0)
    fail("training diverged at step ", s, ": a parameter became ", params[size_t(bad)], " (lr ", r.lr, ")", kKept,
         options_.out_dir, kKeptEnd);
  r.seconds = now_seconds() - t0;
  return r;
}

void TrainingLoop::save_checkpoint(int64_t completed) {
  check(optimizer_.step_count() == completed, "checkpoint: optimizer step mismatch");
  RunDir& run = run_dir();
  const std::string tmp = options_.writer ? run.begin_checkpoint(completed) : std::string();
  task_.save_checkpoint_files(optimizer_, tmp, completed);
  if (options_.writer) run.commit_checkpoint(completed, options_.seed);
}

StepRecord TrainingLoop::run() {
  const bool writer = options_.writer;
  run_dir();
  const bool show = writer && options_.progress, tty = isatty(fileno(stderr));
  std::ofstream log;
  if (writer) {
    log.open(options_.out_dir + "/log.csv", next_step_ == 0 ? std::ios::trunc : std::ios::app);
    if (next_step_ == 0) log << task_.log_header();
  }
  StepRecord last{};
  int64_t done = 0;      // steps run by this call
  double stepping = 0;   // their seconds
  for (int64_t s = next_step_; s < options_.steps; ++s) {
    last = step(s);
    next_step_ = s + 1;
    ++done, stepping += last.seconds, trained_seconds_ += last.seconds;
    last.budget_reached = options_.max_seconds > 0 && trained_seconds_ >= options_.max_seconds;
    task_.after_step(last);
    const bool eval = due_after(next_step_, options_.eval_every, options_.steps) || last.budget_reached;
    if (eval) {
      const MatmulPrecisionScope precision(options_.precision);
      task_.evaluate();
    }
    if (show && (tty || eval || s % options_.progress_every == 0)) {
      const double eta = double(options_.steps - next_step_) * stepping / double(done);
      std::fprintf(stderr, "%s%s%s", tty ? "\r" : "",
                   task_.progress_text(last, options_.steps, format_eta(eta), eval).c_str(), tty ? "   " : "\n");
      if (tty && eval && options_.newline_after_eval) std::fprintf(stderr, "\n");
    }
    if (writer) {
      task_.log_row(log, last, eval);
      log.flush();  // before any commit: the checkpoint records the log's length
    }
    if (due_after(next_step_, options_.checkpoint_every, options_.steps) || last.budget_reached)
      if (writer || options_.collective_save) save_checkpoint(next_step_);
    if (last.budget_reached) break;
  }
  if (show && tty && !options_.newline_after_eval) std::fprintf(stderr, "\n");
  return last;
}

}  // namespace attnkit
