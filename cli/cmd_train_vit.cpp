// `attnkit train vit`: a Vision Transformer (Hugging Face ViTForImageClassification layout, see
// include/attnkit/models/vit.hpp) trained on Fashion-MNIST-style IDX images with the shared image
// trainer (image_training.hpp).
#include <memory>

#include "attnkit/core/error.hpp"
#include "attnkit/models/vit.hpp"
#include "commands.hpp"
#include "image_training.hpp"

namespace attnkit::cli {
namespace {


struct VitFlags {
  ImageTrainFlags train;
  // Defaults: the recipe measured on Fashion-MNIST (docs/models.md, "Vision"): patch 7 (16
  // tokens + [CLS], ~3x cheaper per image than patch 4 and faster per step), mean pooling,
  // PyTorch's fan-in init (Hugging Face's N(0, 0.02) starts the 96-wide model ~5 points lower
  // after 300 steps) and a peak learning rate of 3e-3.
  int64_t patch = 7, dim = 96, layers = 6, heads = 4, mlp_dim = 192;
  std::string pool = "mean";
  std::string init = "fan_in";
  double dropout = 0, attention_dropout = 0;
};

void run_train_vit(const VitFlags& f) {
  VitConfig c;
  c.image_height = c.image_width = 28;  // Fashion-MNIST / MNIST geometry
  c.num_channels = 1;
  c.patch_size = f.patch;
  c.hidden_size = f.dim;
  c.num_hidden_layers = f.layers;
  c.num_attention_heads = f.heads;
  c.intermediate_size = f.mlp_dim;
  check(f.pool == "cls" || f.pool == "mean", "--pool: expected cls or mean, got '", f.pool, "'");
  c.pooling = f.pool == "cls" ? VitPooling::kCls : VitPooling::kMean;
  check(f.init == "trunc_normal" || f.init == "fan_in", "--init: expected trunc_normal or fan_in, got '",
        f.init, "'");
  c.initializer = f.init == "fan_in" ? VitInitializer::kFanIn : VitInitializer::kTruncNormal;
  c.hidden_dropout_prob = f.dropout;
  c.attention_probs_dropout_prob = f.attention_dropout;
  c.num_labels = 10;
  train_fashion_mnist<VitModel>(c, f.train);
}

}  // namespace

void add_train_vit_command(CLI::App& app) {
  CLI::App* train = app.get_subcommand("train");
  auto f = std::make_shared<VitFlags>();
  f->train.opts.max_lr = 3e-3;  // the ViT's measured peak (the shared default is the CNN's 2e-3)
  auto* vit = train->add_subcommand(
      "vit", "Train a Vision Transformer (Hugging Face ViT layout, flash attention) on Fashion-MNIST (IDX)");
  vit->add_option("--patch", f->patch, "Patch size P (28 must be a multiple of it)")->capture_default_str();
  vit->add_option("--dim", f->dim, "Hidden size C")->capture_default_str();
  vit->add_option("--layers", f->layers, "Encoder layers")->capture_default_str();
  vit->add_option("--heads", f->heads, "Attention heads (must divide --dim)")->capture_default_str();
  vit->add_option("--mlp-dim", f->mlp_dim, "MLP width (intermediate_size)")->capture_default_str();
  vit->add_option("--pool", f->pool, "Classifier input: cls ([CLS] token, as Hugging Face) or mean (patch tokens)")
      ->capture_default_str();
  vit->add_option("--init", f->init,
                  "Weight init: trunc_normal (Hugging Face, N(0, 0.02) truncated) or fan_in (PyTorch's "
                  "nn.Linear/Conv2d default, U(+-1/sqrt(fan_in)))")
      ->capture_default_str();
  vit->add_option("--dropout", f->dropout, "Hidden dropout (hidden_dropout_prob)")->capture_default_str();
  vit->add_option("--attention-dropout", f->attention_dropout,
                  "Attention-probability dropout (attention_probs_dropout_prob)")
      ->capture_default_str();
  add_image_train_flags(*vit, f->train, [f] { run_train_vit(*f); });
}

}  // namespace attnkit::cli
