#pragma once
// The config.json fields of Hugging Face's post-/pre-LN transformer encoders that BERT and ViT
// share (BertConfig, VitConfig): the sizes, hidden_act, the two dropouts and layer_norm_eps.
// One reader and writer for both, so the keys, limits and activation names stay the same.
#include <utility>

#include "attnkit/models/config_reader.hpp"
#include "attnkit/nn/activation.hpp"

namespace attnkit::encoder_config {

inline constexpr std::pair<const char*, GeluApproximation> kActivations[] = {
    {"gelu", GeluApproximation::kNone}, {"gelu_new", GeluApproximation::kTanh},
    {"gelu_pytorch_tanh", GeluApproximation::kTanh}};

// hidden_size, num_hidden_layers, num_attention_heads, intermediate_size (required), hidden_act
// (default gelu), hidden_dropout_prob and attention_probs_dropout_prob (default `dropout`),
// layer_norm_eps (default 1e-12).
template <class Config>
void read(ConfigReader& r, Config& c, double dropout) {
  c.hidden_size = r.size("hidden_size", kMaxConfigWidth);
  c.num_hidden_layers = r.size("num_hidden_layers", kMaxConfigLayers);
  c.num_attention_heads = r.size("num_attention_heads", kMaxConfigHeads);
  c.intermediate_size = r.size("intermediate_size", kMaxConfigFfnWidth);
  c.hidden_act = r.choice("hidden_act", GeluApproximation::kNone, kActivations);
  c.hidden_dropout_prob = r.number("hidden_dropout_prob", dropout);
  c.attention_probs_dropout_prob = r.number("attention_probs_dropout_prob", dropout);
  c.layer_norm_eps = r.number("layer_norm_eps", 1e-12);
}

// The fields read() reads but layer_norm_eps (whose place in Hugging Face's files differs).
template <class Config>
ConfigWriter& write(ConfigWriter& w, const Config& c) {
  return w.set("hidden_size", c.hidden_size)
      .set("num_hidden_layers", c.num_hidden_layers)
      .set("num_attention_heads", c.num_attention_heads)
      .set("intermediate_size", c.intermediate_size)
      .set("hidden_act", c.hidden_act == GeluApproximation::kNone ? "gelu" : "gelu_new")
      .set("hidden_dropout_prob", c.hidden_dropout_prob)
      .set("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
}

}  // namespace attnkit::encoder_config
