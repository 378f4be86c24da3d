// `attnkit train cnn` (residual CNN with none / SE / CBAM attention on Fashion-MNIST) and
// `attnkit classify --model DIR FILE...` (PNG / PGM / JPEG / BMP images or an IDX image file).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/io/idx.hpp"
#include "attnkit/io/image_file.hpp"
#include "attnkit/models/cnn.hpp"
#include "attnkit/models/model_dir.hpp"
#include "attnkit/models/model_registry.hpp"
#include "attnkit/train/image_batch.hpp"
#include "commands.hpp"
#include "flags.hpp"
#include "image_training.hpp"

namespace attnkit::cli {
namespace {


struct CnnFlags {
  ImageTrainFlags train;
  std::string attention = "cbam";
  std::vector<int64_t> widths{32, 64, 128};
  int64_t reduction = 8;
};

void run_train_cnn(const CnnFlags& f) {
  CnnConfig c;
  c.attention = parse_channel_attention(f.attention, "--attention");
  c.widths = f.widths;
  c.reduction = f.reduction;
  train_fashion_mnist<CnnModel>(c, f.train);
}

struct ClassifyFlags {
  std::string model;
  std::vector<std::string> files;
  bool invert = false;
  bool json = false;
  int64_t limit = 20;
};

std::string label_name(const ImageClassifier& m, int64_t k) {
  const nlohmann::json j = nlohmann::json::parse(m.config_json());
  if (j.contains("id2label") && j["id2label"].contains(std::to_string(k)))
    return j["id2label"][std::to_string(k)].get<std::string>();
  return std::to_string(k);
}

void run_classify(const ClassifyFlags& f) {
  require_model_dir(f.model, "--model", ModelKind::kImage, "classify");
  for (const std::string& path : f.files) check_readable_file(path, "classify");
  std::unique_ptr<ImageClassifier> model = load_image_classifier(f.model);
  const ImageNormalization norm = load_image_normalization(f.model);
  const ImageShape shape = model->input_shape();
  check(shape.channels == 1, "classify: models with ", shape.channels, " input channels are not supported (grey-scale only)");
  // Gather the images as one data set of the model's size.
  ImageDataset ds;
  ds.rows = shape.height, ds.cols = shape.width, ds.classes = int(model->num_classes());
  std::vector<std::string> names;
  for (const std::string& path : f.files) {
    const bool idx = path.find("idx") != std::string::npos || path.ends_with("-ubyte") ||
                     path.ends_with("-ubyte.gz");
    if (idx) {
      const IdxArray a = read_idx(path);
      check(a.type == IdxType::u8 && a.shape.size() == 3, path, ": expected an IDX u8 image file [N, rows, cols], got ",
            idx_type_name(a.type), " with ", a.shape.size(), " dimensions");
      check(a.shape[1] == shape.height && a.shape[2] == shape.width, path, ": images are ", a.shape[1], "x",
            a.shape[2], ", the model expects ", shape.height, "x", shape.width, " (IDX images are not resized)");
      const int64_t n = std::min<int64_t>(a.shape[0], f.limit);
      const auto* px = reinterpret_cast<const uint8_t*>(a.data.data());
      for (int64_t i = 0; i < n; ++i) {
        ds.images.insert(ds.images.end(), px + i * ds.rows * ds.cols, px + (i + 1) * ds.rows * ds.cols);
        names.push_back(path + "[" + std::to_string(i) + "]");
      }
      if (a.shape[0] > n)
        std::fprintf(stderr, "classify: %s: first %lld of %lld images (--limit)\n", path.c_str(),
                     (long long)n, (long long)a.shape[0]);
      continue;
    }
    GreyImage img = read_grey_image(path);
    if (img.height != shape.height || img.width != shape.width) {
      std::fprintf(stderr, "classify: %s: resized from %lldx%lld to %lldx%lld (bilinear)\n", path.c_str(),
                   (long long)img.width, (long long)img.height, (long long)shape.width, (long long)shape.height);
      img = resize_bilinear(img, shape.height, shape.width);
    }
    if (img.channels_in_file >= 3)
      std::fprintf(stderr, "classify: %s: colour image converted to grey scale\n", path.c_str());
    if (f.invert)
      for (uint8_t& p : img.pixels) p = uint8_t(255 - p);
    ds.images.insert(ds.images.end(), img.pixels.begin(), img.pixels.end());
    names.push_back(path);
  }
  ds.count = int64_t(names.size());
  check(ds.count > 0, "classify: no images given");
  ds.labels.assign(size_t(ds.count), 0);
  Tensor<float, 4> x({ds.count, 1, ds.rows, ds.cols});
  std::vector<int32_t> labels(static_cast<size_t>(ds.count));
  std::vector<int64_t> idx(static_cast<size_t>(ds.count));
  for (int64_t i = 0; i < ds.count; ++i) idx[size_t(i)] = i;
  image_batch(x.view(), labels, ds, idx, {.mean = float(norm.mean), .std = float(norm.std)});
  model->set_training(false);
  const ConstView2 logits = model->forward(x.view());
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < ds.count; ++i) {
    const float* row = logits.ptr(i);
    const int64_t k = logits.shape[1];
    const float mx = *std::max_element(row, row + k);
    double z = 0;
    for (int64_t j = 0; j < k; ++j) z += std::exp(double(row[j] - mx));
    const int64_t best = int64_t(std::max_element(row, row + k) - row);
    const double p = 1.0 / z;
    if (f.json) {
      out.push_back({{"file", names[size_t(i)]}, {"class", best}, {"label", label_name(*model, best)},
                     {"probability", p}});
    } else {
      std::printf("%s: %s (class %lld, p = %.3f)\n", names[size_t(i)].c_str(), label_name(*model, best).c_str(),
                  (long long)best, p);
    }
  }
  if (f.json) std::cout << out.dump(2) << "\n";
}

}  // namespace

void run_image_eval(const std::string& dir, const std::string& data_dir, int64_t limit, bool json) {
  std::unique_ptr<ImageClassifier> model = load_image_classifier(dir);
  const ImageNormalization norm = load_image_normalization(dir);
  const ImageDataset test = load_fashion_mnist(data_dir, DatasetSplit::kTest);
  const ImageEvalResult r = evaluate_images(*model, test, norm, limit);
  if (json) {
    const nlohmann::ordered_json j{{"model_type", model->model_type()}, {"accuracy", r.accuracy},
                                   {"loss", r.loss}, {"images", r.count}, {"data_dir", data_dir}};
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::printf("%s: test accuracy %.4f  loss %.4f  (%lld images of %s)\n", model->model_type().c_str(),
              r.accuracy, r.loss, (long long)r.count, data_dir.c_str());
}

void add_vision_commands(CLI::App& app) {
  CLI::App* train = app.get_subcommand("train");
  auto f = std::make_shared<CnnFlags>();
  auto* cnn = train->add_subcommand(
      "cnn", "Train a residual CNN with none / SE / CBAM channel attention on Fashion-MNIST (IDX)");
  cnn->add_option("--attention", f->attention, "Channel attention in every residual block: none, se or cbam")
      ->capture_default_str();
  cnn->add_option("--widths", f->widths, "Stem width, then one residual stage per further width")
      ->capture_default_str()->delimiter(',');
  cnn->add_option("--reduction", f->reduction, "SE/CBAM MLP reduction ratio r")->capture_default_str();
  add_image_train_flags(*cnn, f->train, [f] { run_train_cnn(*f); });

  auto c = std::make_shared<ClassifyFlags>();
  auto* cls = app.add_subcommand(
      "classify",
      "Classify images with a trained image model: PNG, PGM/PPM, JPEG or BMP files (converted to grey "
      "scale and resized bilinearly to the model's input size) or IDX image files (must match the size)");
  cls->add_option("--model", c->model, "Model directory (config.json, model.safetensors, preprocessor_config.json)")
      ->required();
  cls->add_option("files", c->files, "Image files")->required();
  cls->add_flag("--invert", c->invert, "Invert grey levels first (Fashion-MNIST has light objects on black)");
  cls->add_option("--limit", c->limit, "At most this many images per IDX file")->capture_default_str()->check(integer_in(1));
  add_json_flag(*cls, c->json, "Print a JSON array");
  cls->callback([c] { run_classify(*c); });
}

}  // namespace attnkit::cli
