#pragma once
// Shared pieces of `attnkit train cnn|vit|deformable`: the data and optimisation flags every
// image model takes, and the run (load Fashion-MNIST, resume, train, print the epoch table).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <iterator>
#include <string>

#include "attnkit/models/image_classifier.hpp"
#include "attnkit/train/image_trainer.hpp"

namespace attnkit::cli {

// Fashion-MNIST's class names (its README), in label order: the id2label the train commands store.
inline constexpr const char* kFashionMnistLabels[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

struct ImageTrainFlags {
  ImageTrainOptions opts;
  std::string data_dir;      // MNIST-style IDX directory (default: Debian's Fashion-MNIST)
  uint64_t init_seed = 0;    // weight initialisation (0: use --seed)
  int threads = 0;           // 0: all cores
  bool resume = false;
  bool overwrite = false;    // replace the run --out holds
  bool shape_given = false;  // a model-shape flag was on the command line (see shape_flags_given)
  bool no_augment = false;
  bool json = false;
};

// Adds --out, --data-dir, --epochs, --batch, --lr, --min-lr, --warmup-epochs, --weight-decay,
// --clip, --pad, --no-augment, --max-minutes, --anneal-by-time, --train-limit, --eval-limit, --seed, --threads,
// --precision, --resume, --overwrite, --json to an image-training subcommand, whose callback sets
// f.shape_given (any of cmd's own model-shape flags was given) and calls `run`.
void add_image_train_flags(CLI::App& cmd, ImageTrainFlags& f, std::function<void()> run);

// Checks the flags and --out (run_dir.hpp), loads the data (train and test splits of
// --data-dir), initialises `model` or, with --resume, continues the run in --out with a model of
// the run's own config.json (a shape flag that differs from it is an error), trains, and prints
// one line per epoch plus a summary (or one JSON object with --json).
void run_image_training(ImageClassifier& model, const ImageTrainFlags& f);

// Gives config Fashion-MNIST's class names, validates it and runs the training of a new Model.
template <class Model, class Config>
void train_fashion_mnist(Config config, const ImageTrainFlags& f) {
  config.labels.assign(std::begin(kFashionMnistLabels), std::end(kFashionMnistLabels));
  validate(config);
  Model model(config);
  run_image_training(model, f);
}

}  // namespace attnkit::cli
