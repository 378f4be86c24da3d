// `attnkit dataset [--data-dir DIR] [--split train|test] [--json]`: loads and validates an
// MNIST-style IDX directory (Debian's Fashion-MNIST by default) and prints the image count and
// size, the examples per class and the pixel mean / standard deviation (pixels scaled to [0, 1]).
// A missing or malformed file is an attnkit::Error: one line `attnkit: error: ...`, exit code 2.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/io/idx.hpp"
#include "attnkit/train/image_batch.hpp"
#include "commands.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

struct DatasetOptions {
  std::string data_dir = kFashionMnistDir;
  std::string split = "train";
  bool json = false;
};

void run_dataset(const DatasetOptions& o) {
  check(std::filesystem::is_directory(o.data_dir), "--data-dir: ", o.data_dir,
        std::filesystem::exists(o.data_dir) ? " is not a directory" : ": no such directory",
        " (MNIST-style IDX files; Debian: apt-get install dataset-fashion-mnist)");
  const ImageDataset ds = load_fashion_mnist(o.data_dir, parse_dataset_split(o.split));
  std::vector<int64_t> per_class(size_t(ds.classes), 0);
  for (uint8_t l : ds.labels) ++per_class[l];
  const auto [mean, sd] = ds.count ? pixel_mean_std(ds) : std::pair<double, double>{0, 0};
  if (o.json) {
    nlohmann::json j = {{"data_dir", o.data_dir}, {"split", o.split}, {"count", ds.count},
                        {"rows", ds.rows},        {"cols", ds.cols},   {"per_class", per_class},
                        {"pixel_mean", mean},     {"pixel_std", sd}};
    std::cout << j.dump() << "\n";
    return;
  }
  std::printf("%s (%s): %lld images of %lld x %lld pixels\n", o.data_dir.c_str(), o.split.c_str(),
              (long long)ds.count, (long long)ds.rows, (long long)ds.cols);
  std::printf("per class:");
  for (size_t c = 0; c < per_class.size(); ++c) std::printf(" %zu:%lld", c, (long long)per_class[c]);
  std::printf("\npixel mean %.4f, std %.4f (pixels scaled to [0, 1])\n", mean, sd);
}

}  // namespace

void add_dataset_command(CLI::App& app) {
  auto opts = std::make_shared<DatasetOptions>();
  CLI::App* cmd = app.add_subcommand(
      "dataset", "Validate an MNIST-style IDX directory and print counts, classes and pixel statistics");
  cmd->add_option("--data-dir", opts->data_dir,
                  "directory of {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] files")
      ->capture_default_str();
  cmd->add_option("--split", opts->split, "train or test")->capture_default_str();
  add_json_flag(*cmd, opts->json, "print one JSON object");
  cmd->callback([opts] { run_dataset(*opts); });
}

}  // namespace attnkit::cli
