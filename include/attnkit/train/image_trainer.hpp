#pragma once
// Image classification training for any ImageClassifier (CNN, ViT, deformable encoder):
// epochs over a shuffled training set, seeded crop/flip augmentation, softmax cross-entropy,
// AdamW with warmup + cosine decay (per step), run by the shared TrainingLoop (training_loop.hpp:
// clipping, checks, resume): a test-set evaluation, a log.csv row and a checkpoint after every
// epoch (run_dir.hpp: weights, optimizer moments, step, seed).
// Step s of a run reads images [b·B, (b+1)·B) of epoch e = s / steps_per_epoch's permutation
// (b = s mod steps_per_epoch), a pure function of (seed, e); augmentation is keyed by (seed, e,
// image), so --resume continues the exact uninterrupted run. A wall-clock budget stops training
// early (after the step that crosses it), then evaluates and checkpoints.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/io/idx.hpp"
#include "attnkit/models/image_classifier.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "attnkit/train/adamw.hpp"
#include "attnkit/train/image_batch.hpp"
#include "attnkit/train/run_dir.hpp"
#include "attnkit/train/schedule.hpp"
#include "attnkit/train/training_loop.hpp"

namespace attnkit {

struct ImageTrainOptions {
  int64_t epochs = 10;
  int64_t batch = 128;               // images per step (the last partial batch of an epoch is dropped)
  double max_lr = 2e-3, min_lr = 2e-5;
  double warmup_epochs = 0.5;        // linear warmup length, in epochs
  AdamWOptions adamw{.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05};
  double clip = 0;                   // global gradient-norm bound; 0 = off
  int64_t pad = 2;                   // random-crop padding in pixels (0: no crop)
  bool flip = true;                  // random horizontal flip
  double max_minutes = 0;            // wall-clock budget for training steps; 0 = none
  // With max_minutes: after the warmup the cosine decay follows the training time spent in this
  // process (progress = max(time used / budget, step progress)), so the learning rate reaches
  // min_lr when the budget ends even if `epochs` would take longer. Time-dependent: a run (and
  // --resume) is then no longer bitwise reproducible.
  bool anneal_by_time = false;
  int64_t train_limit = 0;           // use only the first n training images; 0 = all
  int64_t eval_limit = 0;            // evaluate on the first n test images; 0 = all
  uint64_t seed = 1;                 // shuffling, augmentation, dropout
  std::string out_dir{};             // the run directory (run_dir.hpp): checkpoints, model, log.csv
  RunStart start = RunStart::kNew;   // how run() treats out_dir unless resume() was called
  bool progress = true;              // progress lines on stderr
  // Linear and convolution products during training steps and evaluations (the CLI's
  // --precision): f32, or the opt-in bf16 mixed precision (ops/matmul_precision.hpp; weights and
  // AdamW stay f32). bf16 needs gemm_bf16_available().
  MatmulPrecision precision = MatmulPrecision::kF32;
};

// Loss and accuracy of a model over a data set (eval mode).
struct ImageEvalResult {
  double loss = 0, accuracy = 0;
  int64_t count = 0;
};

// One line of the training log: the state after an epoch (or after the budget stopped it).
struct ImageEpochResult {
  int64_t epoch = 0;          // epochs completed (fractional runs report the partial epoch)
  int64_t step = 0;           // optimizer steps completed
  double train_loss = 0, train_accuracy = 0;  // over this epoch's training batches
  ImageEvalResult test;
  double seconds = 0;         // training time of this epoch (excludes evaluation)
  double images_per_second = 0;
};

// Pixel normalisation a model directory records (preprocessor_config.json, Hugging Face keys
// image_mean, image_std, rescale_factor 1/255).
struct ImageNormalization {
  double mean = 0, std = 1;
};
// Writes dir/preprocessor_config.json atomically.
void save_image_normalization(const std::string& dir, const ImageNormalization& norm,
                              const ImageShape& shape);
// Reads dir/preprocessor_config.json; throws attnkit::Error if missing or invalid.
ImageNormalization load_image_normalization(const std::string& dir);

// Evaluates `model` on ds (first `limit` images; 0 = all) in eval mode, batches of `batch`.
ImageEvalResult evaluate_images(ImageClassifier& model, const ImageDataset& ds,
                                const ImageNormalization& norm, int64_t limit = 0,
                                int64_t batch = 500);

class ImageTrainer : private TrainingTask {
 public:
  // Validates the options and that the data sets match the model's input shape and classes.
  ImageTrainer(ImageClassifier& model, const ImageDataset& train, const ImageDataset& test,
               const ImageTrainOptions& options);
  // Continues from out_dir's committed checkpoint (weights, moments, step); returns the step to
  // start at. Throws attnkit::Error, changing nothing on disk, if out_dir holds no complete
  // checkpoint of this model's config and seed (RunDir's refusal rules).
  int64_t resume() { return loop_->resume(); }
  // Trains from the current step to the end (epochs) or the time budget; evaluates after every
  // epoch; writes log.csv and checkpoints. A NaN loss throws attnkit::Error, leaving the last
  // good checkpoint in place.
  std::vector<ImageEpochResult> run();
  // One optimizer step (step index s); returns the batch's mean loss and adds its correct
  // predictions to `correct`.
  double step(int64_t s, int64_t* correct = nullptr);
  // The learning rate of step s: warmup + cosine over the steps, or over the time budget with
  // anneal_by_time (using the training seconds run() has counted so far).
  double learning_rate(int64_t s) const override;
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t total_steps() const { return steps_per_epoch_ * options_.epochs; }
  const ImageNormalization& normalization() const { return norm_; }
  // Commits a checkpoint of the steps done so far (model, preprocessor_config.json, optimizer
  // state) to the run directory as a whole (RunDir::commit_checkpoint).
  void save_checkpoint() { loop_->save_checkpoint(loop_->next_step()); }

 private:
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  const char* trainer() const override { return "image"; }
  std::string config_json() const override { return model_.config_json(); }
  float forward_backward(int64_t step) override;
  std::span<float> gradients() override { return model_.gradients(); }
  std::span<const float> parameters() override { return model_.parameters(); }
  void after_step(const StepRecord& r) override;
  void evaluate() override { test_result_ = evaluate_images(model_, test_, norm_, options_.eval_limit); }
  std::string log_header() const override;
  void log_row(std::ostream& log, const StepRecord& r, bool evaluated) override;
  std::string progress_text(const StepRecord& r, int64_t steps, const std::string& eta,
                            bool evaluated) const override;
  void save_model(const std::string& dir) override;
  void load_weights(const std::string& dir) override { model_.load_weights(dir); }

  ImageClassifier& model_;
  const ImageDataset& train_;
  const ImageDataset& test_;
  ImageTrainOptions options_;
  ImageNormalization norm_;
  AdamW optimizer_;
  int64_t train_count_ = 0, steps_per_epoch_ = 0;
  WarmupCosineSchedule schedule_;
  double trained_seconds_ = 0;      // training-step time in this process (run() counts it)
  double warmup_end_seconds_ = 0;   // trained_seconds_ when the warmup ended (0 if before start)
  std::vector<int64_t> order_;      // permutation of the current epoch
  int64_t order_epoch_ = -1;
  double step_loss_ = 0;            // the last step's mean loss and correct predictions
  int64_t step_correct_ = 0;
  double loss_sum_ = 0, epoch_seconds_ = 0;  // this epoch's steps (in this process)
  int64_t correct_ = 0, seen_ = 0;
  ImageEvalResult test_result_;
  std::vector<ImageEpochResult> results_;  // of the current run()
  std::optional<TrainingLoop> loop_;
};

}  // namespace attnkit
