// `attnkit train cnn|vit|deformable`: shared flags and the training run (see image_training.hpp).
#include "image_training.hpp"

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/io/idx.hpp"
#include "attnkit/train/run_dir.hpp"
#include "attnkit/train/train_checks.hpp"
#include "run_flags.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

const std::set<std::string>& shared_flag_names() {
  static const std::set<std::string> names{
      "--out", "--data-dir", "--epochs", "--batch", "--lr", "--min-lr", "--warmup-epochs", "--weight-decay",
      "--clip", "--pad", "--no-augment", "--max-minutes", "--anneal-by-time", "--train-limit", "--eval-limit",
      "--seed", "--threads", "--precision", "--resume", "--overwrite", "--json", "--help"};
  return names;
}

// True if any of cmd's own model-shape flags (those add_image_train_flags did not add) was given.
bool shape_flags_given(const CLI::App& cmd) {
  for (const CLI::Option* o : cmd.get_options())
    if (o->count() > 0 && shared_flag_names().count(o->get_name()) == 0) return true;
  return false;
}

}  // namespace

void add_image_train_flags(CLI::App& cmd, ImageTrainFlags& f, std::function<void()> run) {
  f.data_dir = kFashionMnistDir;
  cmd.add_option("--out", f.opts.out_dir, "Run directory (model, checkpoints, log.csv; see docs/reliability.md)")
      ->required();
  cmd.add_option("--data-dir", f.data_dir, "MNIST-style IDX directory ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz])")
      ->capture_default_str();
  cmd.add_option("--epochs", f.opts.epochs, "Passes over the training set")->capture_default_str()->check(integer_in(1, 1000000));
  cmd.add_option("--batch", f.opts.batch, "Images per optimizer step")->capture_default_str()->check(integer_in(1, 1000000));
  cmd.add_option("--lr", f.opts.max_lr, "Peak learning rate (AdamW)")->capture_default_str();
  cmd.add_option("--min-lr", f.opts.min_lr, "Final learning rate of the cosine decay")->capture_default_str();
  cmd.add_option("--warmup-epochs", f.opts.warmup_epochs, "Linear warmup length in epochs")->capture_default_str();
  cmd.add_option("--weight-decay", f.opts.adamw.weight_decay, "AdamW decoupled weight decay (matrices and kernels only)")
      ->capture_default_str();
  cmd.add_option("--clip", f.opts.clip, "Global gradient-norm bound (0: off)")->capture_default_str();
  cmd.add_option("--pad", f.opts.pad, "Random-crop padding in pixels (0: no crop)")->capture_default_str();
  cmd.add_flag("--no-augment", f.no_augment, "No random crop or flip");
  cmd.add_option("--max-minutes", f.opts.max_minutes, "Stop training after this many minutes (0: no limit); then evaluate and save")
      ->capture_default_str();
  cmd.add_flag("--anneal-by-time", f.opts.anneal_by_time,
               "With --max-minutes: the cosine decay follows the training time and reaches --min-lr when the "
               "budget ends (not bitwise reproducible)")
      ->needs("--max-minutes");
  cmd.add_option("--train-limit", f.opts.train_limit, "Use only the first N training images (0: all)")->capture_default_str();
  cmd.add_option("--eval-limit", f.opts.eval_limit, "Evaluate on the first N test images (0: all)")->capture_default_str();
  add_seed_flag(cmd, f.opts.seed, "Seed for shuffling, augmentation and initialisation");
  add_threads_flag(cmd, f.threads);
  add_precision_flag(cmd, f.opts.precision);
  auto* resume = cmd.add_flag("--resume", f.resume,
                              "Continue the run in --out from its committed checkpoint (its own config.json)");
  cmd.add_flag("--overwrite", f.overwrite, "Replace the run that --out holds (without it, such an --out is refused)")
      ->excludes(resume);
  add_json_flag(cmd, f.json, "Print the results as one JSON object");
  cmd.callback([&cmd, &f, run = std::move(run)] {
    f.shape_given = shape_flags_given(cmd);
    run();
  });
}

void run_image_training(ImageClassifier& flags_model, const ImageTrainFlags& f) {
  const RunStart how = run_start(f.resume, f.overwrite);
  const RunDir run(f.opts.out_dir, how, "image");  // refusals before any work
  check_optim_flags({.lr = f.opts.max_lr, .min_lr = f.opts.min_lr, .weight_decay = f.opts.adamw.weight_decay,
                     .clip = f.opts.clip, .threads = f.threads});
  std::unique_ptr<ImageClassifier> resumed;  // --resume: a model of the run's own config
  if (how == RunStart::kResume) {
    if (f.shape_given) run.check_config(flags_model.config_json(), "the model-shape flags (all or none)");
    resumed = make_image_classifier(run.checkpoint_config());
    check(resumed->model_type() == flags_model.model_type(), "--resume: ", f.opts.out_dir, " holds a ",
          resumed->model_type(), " run; it cannot be continued as a ", flags_model.model_type(), " run");
  }
  ImageClassifier& model = resumed ? *resumed : flags_model;
  if (f.threads > 0) set_num_threads(f.threads);
  const ImageDataset train = load_fashion_mnist(f.data_dir, DatasetSplit::kTrain);
  const ImageDataset test = load_fashion_mnist(f.data_dir, DatasetSplit::kTest);
  ImageTrainOptions opts = f.opts;
  opts.start = how == RunStart::kOverwrite ? RunStart::kOverwrite : RunStart::kNew;
  if (f.no_augment) opts.pad = 0, opts.flip = false;
  opts.progress = !f.json;
  model.init_random(f.init_seed ? f.init_seed : opts.seed);
  ImageTrainer trainer(model, train, test, opts);
  const int64_t start = f.resume ? trainer.resume() : 0;
  // A finished run resumed again (--json: no results to print).
  if (nothing_to_train(opts.out_dir, start, trainer.total_steps(), true, "", f.json ? stderr : stdout)) return;
  if (!f.json)
    std::fprintf(stderr, "%s: %lld parameters, %lld steps of %lld images (%lld per epoch)%s\n",
                 model.model_type().c_str(), (long long)model.parameter_count(),
                 (long long)trainer.total_steps(), (long long)opts.batch,
                 (long long)trainer.steps_per_epoch(),
                 start > 0 ? (", resuming at step " + std::to_string(start)).c_str() : "");
  const std::vector<ImageEpochResult> results = trainer.run();
  double seconds = 0, images = 0;
  for (const auto& r : results) seconds += r.seconds, images += r.images_per_second * r.seconds;
  if (f.json) {
    nlohmann::ordered_json j;
    j["model_type"] = model.model_type();
    j["parameters"] = model.parameter_count();
    j["threads"] = num_threads();
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const auto& r : results)
      rows.push_back({{"epoch", r.epoch}, {"step", r.step}, {"train_loss", r.train_loss},
                      {"train_accuracy", r.train_accuracy}, {"test_loss", r.test.loss},
                      {"test_accuracy", r.test.accuracy}, {"seconds", r.seconds},
                      {"images_per_second", r.images_per_second}});
    j["epochs"] = rows;
    j["train_seconds"] = seconds;
    j["images_per_second"] = seconds > 0 ? images / seconds : 0.0;
    j["test_accuracy"] = results.empty() ? 0.0 : results.back().test.accuracy;
    std::cout << j.dump(2) << "\n";
    return;
  }
  if (!results.empty())
    std::printf("%s: test accuracy %.4f after %lld steps, %.1f min of training (%.0f images/s, %d threads); saved to %s\n",
                model.model_type().c_str(), results.back().test.accuracy, (long long)results.back().step,
                seconds / 60.0, seconds > 0 ? images / seconds : 0.0, num_threads(), opts.out_dir.c_str());
}

}  // namespace attnkit::cli
