#pragma once
// BERT training: masked-LM (optionally + NSP) pretraining on documents, or fine-tuning on a task's
// prepared examples (sequence classes, token classes, spans; bert_tasks.hpp), with the batches laid out by padding, length buckets or packing (bert_batching.hpp),
// AdamW, warmup + cosine schedule, global-norm clipping, periodic evaluation, a CSV log and
// checkpoints committed as a whole into the run directory (run_dir.hpp). Example i of a run is a pure function of
// (seed, i) and step s uses examples [s·B, (s+1)·B) (bucketing regroups them within pools of
// `bucket_pool` steps), so --resume reproduces the uninterrupted losses bit for bit.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/models/bert.hpp"
#include "attnkit/train/adamw.hpp"
#include "attnkit/train/bert_batching.hpp"
#include "attnkit/train/bert_data.hpp"
#include "attnkit/train/bert_tasks.hpp"
#include "attnkit/train/run_dir.hpp"
#include "attnkit/train/schedule.hpp"

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

class BertTrainer {
 public:
  // Pretraining (objective mlm or mlm+nsp) on documents.
  BertTrainer(BertModel& model, BertDocuments docs, const BertTrainOptions& options);
  // Fine-tuning (objective classify, tokens or span) on a task's examples; training example i is
  // a Philox-uniform draw from task.train keyed by (seed, i).
  BertTrainer(BertModel& model, BertTaskData task, const BertTrainOptions& options);
  // Continues from out_dir's committed checkpoint (weights, optimizer state, step); returns the
  // step to start at. Throws attnkit::Error, changing nothing on disk, if out_dir holds no
  // complete checkpoint of this model's config and seed (RunDir's refusal rules).
  int64_t resume();
  // Trains from the current step to options.steps; returns the last step's result. A NaN loss
  // or gradient throws attnkit::Error and leaves the last good checkpoint in place.
  BertStepResult run();
  // One optimizer step on the examples of step `step`.
  BertStepResult step(int64_t step);
  // The examples of step `step`, in batch order (after bucketing).
  std::vector<BertExample> step_examples(int64_t step) const;
  // Validation loss (and accuracy) over up to max_examples deterministic examples, in eval mode.
  BertEvalResult evaluate(int64_t max_examples);
  // Commits a checkpoint of `completed_steps` steps (weights, config, optimizer state) to the
  // run directory as a whole (RunDir::commit_checkpoint).
  void save_checkpoint(int64_t completed_steps);

 private:
  BertExample example(uint64_t index, bool validation) const;
  void check_setup() const;
  bool fine_tuning() const;

  BertModel& model_;
  BertDocuments docs_;
  BertTaskData task_;
  BertTrainOptions options_;
  AdamW optimizer_;
  std::optional<RunDir> run_;  // opened by resume() or the first run()
  int64_t next_step_ = 0;

  RunDir& run_dir();
};

// The model's tensors as AdamW parameters.
std::vector<NamedParameter> bert_named_parameters(BertModel& model);

// Accuracy of always predicting the most frequent training class (sequence labels, or token
// labels over labelled tokens), on the validation examples.
double majority_baseline(const BertTaskData& task);

}  // namespace attnkit
