#pragma once
// BERT training: masked-LM (optionally + NSP) pretraining on documents, or fine-tuning on a task's
// prepared examples (sequence classes, token classes, spans; bert_tasks.hpp), with the batches laid out by padding, length buckets or packing (bert_batching.hpp),
// AdamW and warmup + cosine schedule, run by the shared TrainingLoop (training_loop.hpp: clipping,
// checks, log, progress, evaluation and checkpoint cadence, resume). Example i of a run is a pure function of
// (seed, i) and step s uses examples [s·B, (s+1)·B) (bucketing regroups them within pools of
// `bucket_pool` steps), so --resume reproduces the uninterrupted losses bit for bit.
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/models/bert.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "attnkit/train/adamw.hpp"
#include "attnkit/train/bert_batching.hpp"
#include "attnkit/train/bert_data.hpp"
#include "attnkit/train/bert_tasks.hpp"
#include "attnkit/train/run_dir.hpp"
#include "attnkit/train/schedule.hpp"
#include "attnkit/train/training_loop.hpp"

namespace attnkit {

enum class BertObjective { kMlm, kMlmNsp, kClassify, kTokens, kSpan };

// "mlm", "mlm+nsp" → objective; throws attnkit::Error naming --objective otherwise.
BertObjective parse_bert_objective(const std::string& name);

struct BertTrainOptions {
  BertObjective objective = BertObjective::kMlm;
  Batching batching = Batching::kPack;
  int64_t steps = 300;         // optimizer steps in total (a resumed run continues to this)
  int64_t batch = 16;          // examples per step
  int64_t max_len = 128;       // tokens per example (and per packed row)
  int64_t bucket_pool = 8;     // steps whose examples are sorted together for bucketing
  WarmupCosineSchedule schedule{.max_lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 30, .total_steps = 300};
  AdamWOptions adamw{.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .weight_decay = 0.01};
  double clip = 1.0;           // global gradient-norm bound; 0 = off
  int64_t eval_every = 100;    // steps between validation evaluations; 0 = only at the end
  int64_t eval_examples = 256; // validation examples per evaluation
  int64_t checkpoint_every = 100;  // steps between checkpoints; 0 = only at the end
  uint64_t seed = 1;           // keys examples, masking and dropout
  std::string out_dir{};       // the run directory (run_dir.hpp): checkpoints, model, log.csv
  RunStart start = RunStart::kNew;  // how run() treats out_dir unless resume() was called
  bool progress = true;
  // Linear products during training steps and evaluations (the CLI's --precision): f32, or the
  // opt-in bf16 mixed precision (ops/matmul_precision.hpp; weights and AdamW stay f32).
  MatmulPrecision precision = MatmulPrecision::kF32;
};

struct BertStepResult {
  int64_t step = 0;
  float loss = 0, mlm_loss = 0, nsp_loss = 0;
  double lr = 0, grad_norm = 0;
  int64_t real_tokens = 0, computed_tokens = 0, loss_positions = 0;
  double seconds = 0;
};

struct BertEvalResult {
  double loss = 0;       // MLM: mean over masked positions; tasks: mean over examples
  double accuracy = 0;   // NSP accuracy, class accuracy, token accuracy, or span exact match
  double f1 = 0;         // tokens: F1 of class 1 (the attribution name); 0 otherwise
  int64_t count = 0;     // masked positions (MLM) or examples (tasks) evaluated
  double loss_fraction = 0;  // MLM: masked positions / real tokens
};

class BertTrainer : private TrainingTask {
 public:
  // Pretraining (objective mlm or mlm+nsp) on documents.
  BertTrainer(BertModel& model, BertDocuments docs, const BertTrainOptions& options);
  // Fine-tuning (objective classify, tokens or span) on a task's examples; training example i is
  // a Philox-uniform draw from task.train keyed by (seed, i).
  BertTrainer(BertModel& model, BertTaskData task, const BertTrainOptions& options);
  // Continues from out_dir's committed checkpoint (weights, optimizer state, step); returns the
  // step to start at. Throws attnkit::Error, changing nothing on disk, if out_dir holds no
  // complete checkpoint of this model's config and seed (RunDir's refusal rules).
  int64_t resume() { return loop_.resume(); }
  // Trains from the current step to options.steps; returns the last step's result. A NaN loss
  // or gradient throws attnkit::Error and leaves the last good checkpoint in place.
  BertStepResult run() { return result(loop_.run()); }
  // One optimizer step on the examples of step `step`.
  BertStepResult step(int64_t step) { return result(loop_.step(step)); }
  // The examples of step `step`, in batch order (after bucketing).
  std::vector<BertExample> step_examples(int64_t step) const;
  // Validation loss (and accuracy) over up to max_examples deterministic examples, in eval mode.
  BertEvalResult evaluate(int64_t max_examples);
  // Commits a checkpoint of `completed_steps` steps (weights, config, optimizer state) to the
  // run directory as a whole (RunDir::commit_checkpoint).
  void save_checkpoint(int64_t completed_steps) { loop_.save_checkpoint(completed_steps); }

 private:
  BertExample example(uint64_t index, bool validation) const;
  void check_setup() const;
  bool fine_tuning() const;
  TrainingLoopOptions loop_options() const;
  BertStepResult result(const StepRecord& r) const;

  const char* trainer() const override { return "bert"; }
  std::string config_json() const override { return bert_config_to_json(model_.config()); }
  float forward_backward(int64_t step) override;
  std::span<float> gradients() override { return model_.gradients(); }
  std::span<const float> parameters() override { return model_.parameters(); }
  double learning_rate(int64_t step) const override { return warmup_cosine_lr(options_.schedule, step); }
  void after_step(const StepRecord& r) override;
  void evaluate() override { val_ = evaluate(options_.eval_examples); }
  std::string log_header() const override;
  void log_row(std::ostream& log, const StepRecord& r, bool evaluated) override;
  std::string progress_text(const StepRecord& r, int64_t steps, const std::string& eta,
                            bool evaluated) const override;
  void save_model(const std::string& dir) override { model_.save(dir); }
  void load_weights(const std::string& dir) override;

  BertModel& model_;
  BertDocuments docs_;
  BertTaskData task_;
  BertTrainOptions options_;
  AdamW optimizer_;
  TrainingLoop loop_;
  BertStepResult last_;          // the last step's losses and token counts
  double real_done_ = 0, seconds_done_ = 0;
  BertEvalResult val_;
};

// Accuracy of always predicting the most frequent training class (sequence labels, or token
// labels over labelled tokens), on the validation examples.
double majority_baseline(const BertTaskData& task);

}  // namespace attnkit
