// `attnkit train deformable`: the deformable-attention image classifier
// (models/deformable_classifier.hpp: a CNN feature pyramid read by a Deformable DETR encoder) on
// Fashion-MNIST, with the shared image-training flags (image_training.hpp).
#include <memory>

#include "attnkit/models/deformable_classifier.hpp"
#include "commands.hpp"
#include "image_training.hpp"

namespace attnkit::cli {
namespace {


struct DeformableFlags {
  ImageTrainFlags train;
  DeformableConfig config;
};

}  // namespace

void add_train_deformable_command(CLI::App& app) {
  CLI::App* train = app.get_subcommand("train");
  auto f = std::make_shared<DeformableFlags>();
  DeformableConfig& c = f->config;
  auto* cmd = train->add_subcommand(
      "deformable",
      "Train a multi-scale deformable-attention classifier (CNN pyramid + Deformable DETR encoder) "
      "on Fashion-MNIST (IDX)");
  cmd->add_option("--widths", c.widths,
                  "Backbone widths: the stride-1 stem, then one stride-2 stage per level")
      ->capture_default_str()->delimiter(',');
  cmd->add_option("--d-model", c.d_model, "Encoder width C (multiple of 4 and of --heads)")
      ->capture_default_str();
  cmd->add_option("--heads", c.heads, "Attention heads H")->capture_default_str();
  cmd->add_option("--points", c.points, "Sampling points per head and level P")->capture_default_str();
  cmd->add_option("--layers", c.layers, "Encoder layers L")->capture_default_str();
  cmd->add_option("--ffn-dim", c.ffn_dim, "Encoder feed-forward width F")->capture_default_str();
  add_image_train_flags(*cmd, f->train,
                        [f] { train_fashion_mnist<DeformableClassifier>(f->config, f->train); });
}

}  // namespace attnkit::cli
