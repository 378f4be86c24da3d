// Image classification trainer (see image_trainer.hpp).
#include "attnkit/train/image_trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <set>
#include <sstream>

#include "attnkit/core/error.hpp"
#include "attnkit/core/rng.hpp"
#include "attnkit/nn/cross_entropy.hpp"

namespace attnkit {

namespace {

// Decay only matrices and kernels (rank >= 2) that are not embeddings (ViT's cls token and
// position table), as timm's no_weight_decay does.
NoDecayPredicate no_decay_for(const ImageClassifier& model) {
  std::set<std::string, std::less<>> excluded;
  for (const auto& p : model.parameter_info())
    if (p.shape.size() < 2 || p.name.find("embeddings.cls_token") != std::string::npos ||
        p.name.find("position_embeddings") != std::string::npos)
      excluded.insert(p.name);
  return [excluded](std::string_view name) { return excluded.count(name) > 0; };
}

void check_dataset(const ImageClassifier& model, const ImageDataset& ds, const char* which) {
  const ImageShape s = model.input_shape();
  check(ds.count > 0, "--data-dir: the ", which, " set is empty");
  check(s.channels == 1 && ds.rows == s.height && ds.cols == s.width, "--data-dir: the ", which,
        " images are ", ds.rows, "x", ds.cols, " grey-scale, the model expects ", s.channels, "x",
        s.height, "x", s.width);
  check(ds.classes <= model.num_classes(), "--data-dir: the ", which, " set has ", ds.classes,
        " classes, the model ", model.num_classes());
}

// Mean loss over the batch and the number of correct argmax predictions; d_logits (if not empty)
// receives the gradient of the mean loss.
double batch_loss(ConstView2 logits, std::span<const int32_t> labels, View2 d_logits,
                  int64_t* correct) {
  const int64_t n = logits.shape[0], k = logits.shape[1];
  std::vector<float> losses(static_cast<size_t>(n)), lse(static_cast<size_t>(n));
  const double loss = cross_entropy_forward(losses, lse, logits, labels);
  if (correct) {
    for (int64_t i = 0; i < n; ++i) {
      const float* row = logits.ptr(i);
      *correct += int64_t(std::max_element(row, row + k) - row) == labels[size_t(i)];
    }
  }
  if (!d_logits.empty()) cross_entropy_backward(d_logits, logits, labels, lse, 1.0f);
  return loss;
}

}  // namespace

void save_image_normalization(const std::string& dir, const ImageNormalization& norm,
                              const ImageShape& shape) {
  nlohmann::ordered_json j;
  j["do_rescale"] = true;
  j["rescale_factor"] = 1.0 / 255.0;
  j["do_normalize"] = true;
  j["image_mean"] = {norm.mean};
  j["image_std"] = {norm.std};
  j["size"] = {{"height", shape.height}, {"width", shape.width}};
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/preprocessor_config.json", tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << "\n";
    out.flush();
    check(bool(out), "cannot write ", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  check(!ec, "cannot rename ", tmp, ": ", ec.message());
}

ImageNormalization load_image_normalization(const std::string& dir) {
  const std::string path = dir + "/preprocessor_config.json";
  std::ifstream in(path);
  check(bool(in), "cannot read ", path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    ImageNormalization n{j.at("image_mean").at(0).get<double>(), j.at("image_std").at(0).get<double>()};
    check(std::isfinite(n.mean) && std::isfinite(n.std) && n.std > 0, path,
          ": image_mean/image_std must be finite with std > 0");
    return n;
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": invalid preprocessor config: ", e.what());
  }
}

ImageEvalResult evaluate_images(ImageClassifier& model, const ImageDataset& ds,
                                const ImageNormalization& norm, int64_t limit, int64_t batch) {
  check(batch >= 1, "evaluate_images: batch must be >= 1");
  const int64_t n = limit > 0 ? std::min(limit, ds.count) : ds.count;
  const ImageShape s = model.input_shape();
  model.set_training(false);
  ImageEvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  Tensor<float, 4> x;
  std::vector<int32_t> labels;
  std::vector<int64_t> idx;
  for (int64_t b0 = 0; b0 < n; b0 += batch) {
    const int64_t b = std::min(batch, n - b0);
    if (x.shape()[0] != b) x = Tensor<float, 4>({b, s.channels, s.height, s.width});
    labels.resize(size_t(b));
    idx.resize(size_t(b));
    for (int64_t i = 0; i < b; ++i) idx[size_t(i)] = b0 + i;
    image_batch(x.view(), labels, ds, idx, {.mean = float(norm.mean), .std = float(norm.std)});
    const ConstView2 logits = model.forward(x.view());
    loss_sum += batch_loss(logits, labels, View2{}, &correct) * double(b);
  }
  r.count = n;
  r.loss = n > 0 ? loss_sum / double(n) : 0;
  r.accuracy = n > 0 ? double(correct) / double(n) : 0;
  return r;
}

ImageTrainer::ImageTrainer(ImageClassifier& model, const ImageDataset& train, const ImageDataset& test,
                           const ImageTrainOptions& options)
    : model_(model),
      train_(train),
      test_(test),
      options_(options),
      optimizer_(named_parameters(model), options.adamw, no_decay_for(model)) {
  check(options_.epochs >= 1, "--epochs: must be >= 1, got ", options_.epochs);
  check(options_.batch >= 1, "--batch: must be >= 1, got ", options_.batch);
  check(std::isfinite(options_.max_lr) && options_.max_lr > 0, "--lr: must be a finite number > 0, got ",
        options_.max_lr);
  check(std::isfinite(options_.min_lr) && options_.min_lr >= 0 && options_.min_lr <= options_.max_lr,
        "--min-lr: must be in [0, --lr = ", options_.max_lr, "], got ", options_.min_lr);
  check(std::isfinite(options_.warmup_epochs) && options_.warmup_epochs >= 0 &&
            options_.warmup_epochs <= double(options_.epochs),
        "--warmup-epochs: must be in [0, --epochs = ", options_.epochs, "], got ", options_.warmup_epochs);
  check(options_.pad >= 0 && options_.pad < 8, "--pad: must be in [0, 8), got ", options_.pad);
  check(std::isfinite(options_.max_minutes) && options_.max_minutes >= 0, "--max-minutes: must be >= 0, got ",
        options_.max_minutes);
  check(std::isfinite(options_.clip) && options_.clip >= 0, "--clip: must be a finite number >= 0, got ",
        options_.clip);
  check(options_.train_limit >= 0, "--train-limit: must be >= 0, got ", options_.train_limit);
  check(options_.eval_limit >= 0, "--eval-limit: must be >= 0, got ", options_.eval_limit);
  check(!options_.out_dir.empty(), "--out: a directory is required");
  check_dataset(model, train, "training");
  check_dataset(model, test, "test");
  train_count_ = options_.train_limit > 0 ? std::min(options_.train_limit, train.count) : train.count;
  check(train_count_ >= options_.batch, "--batch: ", options_.batch, " exceeds the ", train_count_,
        " training images (--data-dir, --train-limit)");
  steps_per_epoch_ = train_count_ / options_.batch;
  const auto [mean, std] = pixel_mean_std(train);
  norm_ = {mean, std > 0 ? std : 1.0};
  schedule_ = {.max_lr = options_.max_lr, .min_lr = options_.min_lr,
               .warmup_steps = int64_t(std::llround(options_.warmup_epochs * double(steps_per_epoch_))),
               .total_steps = total_steps()};
  schedule_.warmup_steps = std::min(schedule_.warmup_steps, schedule_.total_steps);
  loop_.emplace(static_cast<TrainingTask&>(*this), optimizer_,
                TrainingLoopOptions{.steps = total_steps(), .eval_every = steps_per_epoch_,
                                    .checkpoint_every = steps_per_epoch_, .clip = options_.clip,
                                    .max_seconds = options_.max_minutes * 60.0, .seed = options_.seed,
                                    .out_dir = options_.out_dir, .start = options_.start,
                                    .progress = options_.progress,
                                    .progress_every = std::max<int64_t>(1, steps_per_epoch_ / 10),
                                    .newline_after_eval = true, .precision = options_.precision});
}

std::vector<int64_t> ImageTrainer::epoch_order(int64_t epoch) const {
  // Fisher-Yates with Philox draws keyed by (seed, epoch, i): the same order on any platform.
  std::vector<int64_t> order(static_cast<size_t>(train_count_));
  for (int64_t i = 0; i < train_count_; ++i) order[size_t(i)] = i;
  for (int64_t i = train_count_ - 1; i > 0; --i) {
    const auto r = philox4x32(options_.seed ^ 0x5eedf00dULL, {uint32_t(i), uint32_t(epoch), 7, 0});
    const uint64_t u = (uint64_t(r[0]) << 32) | r[1];
    std::swap(order[size_t(i)], order[size_t(u % uint64_t(i + 1))]);
  }
  return order;
}

float ImageTrainer::forward_backward(int64_t s) {
  const int64_t epoch = s / steps_per_epoch_, b = s % steps_per_epoch_;
  if (order_epoch_ != epoch) order_ = epoch_order(epoch), order_epoch_ = epoch;
  const ImageShape sh = model_.input_shape();
  const int64_t n = options_.batch;
  Tensor<float, 4> x({n, sh.channels, sh.height, sh.width});
  std::vector<int32_t> labels(static_cast<size_t>(n));
  const std::span<const int64_t> idx(order_.data() + b * n, size_t(n));
  image_batch(x.view(), labels, train_, idx,
              {.mean = float(norm_.mean), .std = float(norm_.std), .pad = options_.pad,
               .flip = options_.flip, .seed = options_.seed, .epoch = uint64_t(epoch)});
  model_.set_training(true, options_.seed * 1000003ULL + uint64_t(s));
  model_.zero_grad();
  const ConstView2 logits = model_.forward(x.view());
  Tensor<float, 2> d_logits({n, logits.shape[1]});
  step_correct_ = 0;
  step_loss_ = batch_loss(logits, labels, d_logits.view(), &step_correct_);
  if (std::isfinite(step_loss_)) model_.backward(d_logits.view());
  return float(step_loss_);
}

double ImageTrainer::step(int64_t s, int64_t* correct) {
  loop_->step(s);
  if (correct) *correct += step_correct_;
  return step_loss_;
}

void ImageTrainer::after_step(const StepRecord& r) {
  trained_seconds_ += r.seconds;
  if (r.step + 1 == schedule_.warmup_steps) warmup_end_seconds_ = trained_seconds_;
  loss_sum_ += step_loss_, correct_ += step_correct_, seen_ += options_.batch, epoch_seconds_ += r.seconds;
}

double ImageTrainer::learning_rate(int64_t s) const {
  const double by_steps = warmup_cosine_lr(schedule_, s);
  const double budget = options_.max_minutes * 60.0;
  if (!options_.anneal_by_time || budget <= 0 || s < schedule_.warmup_steps) return by_steps;
  // Cosine over the budget left after the warmup; never behind the step schedule.
  const double span = budget - warmup_end_seconds_;
  const double by_time = span > 0 ? (trained_seconds_ - warmup_end_seconds_) / span : 1.0;
  const int64_t decay_steps = schedule_.total_steps - schedule_.warmup_steps;
  const double by_step = decay_steps > 0 ? double(s - schedule_.warmup_steps) / double(decay_steps) : 1.0;
  const double progress = std::clamp(std::max(by_time, by_step), 0.0, 1.0);
  return options_.min_lr +
         0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (options_.max_lr - options_.min_lr);
}

void ImageTrainer::save_model(const std::string& dir) {
  model_.save(dir);
  save_image_normalization(dir, norm_, model_.input_shape());
}

std::string ImageTrainer::log_header() const {
  return "epoch,step,train_loss,train_accuracy,test_loss,test_accuracy,seconds,images_per_second\n";
}

std::string ImageTrainer::progress_text(const StepRecord& r, int64_t steps, const std::string&, bool) const {
  char line[256];
  std::snprintf(line, sizeof line, "epoch %lld step %lld/%lld | loss %.4f | acc %.3f | %.0f img/s",
                (long long)(r.step / steps_per_epoch_ + 1), (long long)(r.step + 1), (long long)steps,
                loss_sum_ / double(seen_ / options_.batch), double(correct_) / double(seen_),
                double(seen_) / epoch_seconds_);
  return line;
}

// One row per epoch (or per budget stop): the epoch's training statistics and the evaluation.
void ImageTrainer::log_row(std::ostream& log, const StepRecord& step, bool evaluated) {
  if (!evaluated) return;
  ImageEpochResult r;
  r.epoch = step.step / steps_per_epoch_ + 1;
  r.step = step.step + 1;
  const int64_t batches = seen_ / options_.batch;
  r.train_loss = batches > 0 ? loss_sum_ / double(batches) : 0;
  r.train_accuracy = seen_ > 0 ? double(correct_) / double(seen_) : 0;
  r.seconds = epoch_seconds_;
  r.images_per_second = epoch_seconds_ > 0 ? double(seen_) / epoch_seconds_ : 0;
  r.test = test_result_;
  log << r.epoch << ',' << r.step << ',' << r.train_loss << ',' << r.train_accuracy << ',' << r.test.loss << ','
      << r.test.accuracy << ',' << r.seconds << ',' << r.images_per_second << '\n';
  if (options_.progress)
    std::fprintf(stderr, "epoch %lld%s: train loss %.4f acc %.4f | test loss %.4f acc %.4f | %.0f s, %.0f img/s\n",
                 (long long)r.epoch, step.budget_reached ? " (time budget reached)" : "", r.train_loss,
                 r.train_accuracy, r.test.loss, r.test.accuracy, r.seconds, r.images_per_second);
  results_.push_back(r);
  loss_sum_ = 0, epoch_seconds_ = 0, correct_ = 0, seen_ = 0;
}

std::vector<ImageEpochResult> ImageTrainer::run() {
  results_.clear();
  loss_sum_ = 0, epoch_seconds_ = 0, correct_ = 0, seen_ = 0;
  loop_->run();
  return results_;
}

}  // namespace attnkit
