#pragma once
// Causal-LM training of a GptModel on a TextCorpus: random windows keyed by (seed, step) (after
// the model's register tokens, if it has any: seq_len counts them), AdamW and warmup + cosine
// schedule, run by the shared TrainingLoop (training_loop.hpp: clipping, checks, log, progress,
// evaluation and checkpoint cadence, resume). A resumed run reproduces the uninterrupted run bit
// for bit (the data position is the step: no hidden sampler state).
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "attnkit/io/text_corpus.hpp"
#include "attnkit/models/gpt.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "attnkit/train/adamw.hpp"
#include "attnkit/train/run_dir.hpp"
#include "attnkit/train/schedule.hpp"
#include "attnkit/train/training_loop.hpp"

namespace attnkit {

struct TrainOptions {
  int64_t steps = 1000;          // optimizer steps in total (a resumed run continues to this)
  int64_t batch = 8;             // windows per step
  int64_t seq_len = 256;         // tokens per window (<= the model's context)
  WarmupCosineSchedule schedule{.max_lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 50, .total_steps = 1000};
  AdamWOptions adamw{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  double clip = 1.0;             // global gradient-norm bound; 0 = off
  int64_t eval_every = 100;      // steps between validation evaluations; 0 = only at the end
  int64_t eval_windows = 16;     // validation windows per evaluation
  int64_t checkpoint_every = 200;  // steps between checkpoints; 0 = only at the end
  uint64_t seed = 1;             // keys the training windows
  std::string out_dir;           // the run directory (run_dir.hpp): checkpoints, model, log.csv
  RunStart start = RunStart::kNew;  // how run() treats out_dir unless resume() was called
  bool progress = true;          // progress bar (or plain lines when stderr is not a TTY)
  // Linear layers' products during training steps and evaluations (the CLI's --precision): f32,
  // or the opt-in bf16 mixed precision (ops/matmul_precision.hpp; weights and AdamW stay f32).
  MatmulPrecision precision = MatmulPrecision::kF32;
  // Data parallelism (the CLI's --dp under mpirun): this process computes windows
  // [dp_rank·B/P, (dp_rank+1)·B/P) of each step's batch (B % P == 0), dp_average averages a
  // buffer over the P processes in place (the gradients, then the loss), and only dp_rank 0
  // writes the log and checkpoints. The averaged gradient is the whole batch's, so P processes
  // follow the single-process run up to float32 rounding.
  int64_t dp_rank = 0, dp_size = 1;
  std::function<void(std::span<float>)> dp_average;
  // Tensor parallelism (the CLI's --tp under mpirun; dist/tp_train.hpp sets these): the model
  // is this process's shard (gpt_tensor_parallel_shard) with its tensor-parallel sum set, and
  // every process runs the whole batch. tp_sync_gradients runs after backward (sums replicated
  // KV heads' gradients); tp_grad_norm returns the whole model's gradient norm (clipping, log);
  // tp_save(optimizer, dir) is collective on every process and writes an ordinary one-process
  // checkpoint (weights and AdamW moments of the whole model); tp_load(optimizer, dir) loads
  // one into this shard (resume). Processes with tp_rank > 0 write no log.
  int64_t tp_rank = 0;
  std::function<void()> tp_sync_gradients;
  std::function<double()> tp_grad_norm;
  std::function<void(AdamW&, const std::string&)> tp_save, tp_load;
};

struct TrainStepResult {
  int64_t step;
  float loss;
  double lr, grad_norm, tokens_per_second;
};

class GptTrainer : private TrainingTask {
 public:
  GptTrainer(GptModel& model, const TextCorpus& corpus, const TrainOptions& options);
  // Continues from out_dir's committed checkpoint (weights, optimizer state, step); returns the
  // step to start at. Throws attnkit::Error, changing nothing on disk, if out_dir holds no
  // complete checkpoint of this model's config and seed (RunDir's refusal rules).
  int64_t resume() { return loop_.resume(); }
  // Trains from the current step to options.steps; returns the last step's result. A NaN or
  // infinite loss throws attnkit::Error and leaves the last good checkpoint in place.
  TrainStepResult run() { return result(loop_.run()); }
  // One optimizer step on the windows of step `step`.
  TrainStepResult step(int64_t step) { return result(loop_.step(step)); }
  // Mean loss over `windows` consecutive validation windows (deterministic).
  double evaluate(int64_t windows);
  // Commits a checkpoint of `completed_steps` steps (weights, config, optimizer state) to the
  // run directory as a whole (RunDir::commit_checkpoint).
  void save_checkpoint(int64_t completed_steps) { loop_.save_checkpoint(completed_steps); }

 private:
  const char* trainer() const override { return "gpt"; }
  std::string config_json() const override;
  float forward_backward(int64_t step) override;
  std::span<float> gradients() override { return model_.gradients(); }
  std::span<const float> parameters() override { return model_.parameters(); }
  double clip_gradients(double clip) override;
  double learning_rate(int64_t step) const override { return warmup_cosine_lr(options_.schedule, step); }
  void after_step(const StepRecord& r) override;
  void evaluate() override { val_loss_ = evaluate(options_.eval_windows); }
  std::string log_header() const override { return "step,loss,lr,grad_norm,tokens_per_s,val_loss\n"; }
  void log_row(std::ostream& log, const StepRecord& r, bool evaluated) override;
  std::string progress_text(const StepRecord& r, int64_t steps, const std::string& eta,
                            bool evaluated) const override;
  void save_model(const std::string& dir) override { model_.save(dir); }
  void load_weights(const std::string& dir) override;
  void save_checkpoint_files(AdamW& optimizer, const std::string& dir, int64_t step) override;
  void load_checkpoint(AdamW& optimizer, const std::string& dir) override;
  TrainStepResult result(const StepRecord& r) const;

  GptModel& model_;
  const TextCorpus& corpus_;
  TrainOptions options_;
  AdamW optimizer_;
  TrainingLoop loop_;
  int64_t step_tokens_ = 0;          // tokens this process computed in the last step
  double tokens_done_ = 0, seconds_done_ = 0;  // all processes' tokens and the steps' time
  double val_loss_ = 0;
};

// Mean next-token loss of `model` over up to `max_windows` consecutive windows of `tokens`
// (each seq_len + 1 long); also returns bits per byte = loss / ln 2 for the byte tokenizer.
// With k registers (attnkit_registers) each window is the k register ids then seq_len - k text
// tokens, and only the text's next tokens are scored (as in training).
double evaluate_loss(GptModel& model, std::span<const int32_t> tokens, int64_t seq_len,
                     int64_t max_windows);

}  // namespace attnkit
