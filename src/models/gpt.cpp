// GPT model: parameter layout with Hugging Face Llama names, forward (embedding → L × [RMSNorm →
// attention block → residual → RMSNorm → SwiGLU MLP → residual] → RMSNorm → LM head + fused
// cross-entropy) and its backward in reverse order, llm.c style.
#include "attnkit/models/gpt.hpp"

#include <cmath>
#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/models/model_dir.hpp"
#include "attnkit/nn/activation.hpp"
#include "attnkit/nn/cross_entropy.hpp"
#include "attnkit/nn/embedding.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/norm.hpp"
#include "attnkit/nn/parallel_blocks.hpp"

namespace attnkit {

// Saved activations of one forward over T tokens (every buffer the backward reads).
class GptActivations {
 public:
  GptActivations(const GptConfig& c, const AttentionBlockOptions& bo, int64_t t) : tokens(t) {
    const int64_t C = c.hidden_size, F = c.intermediate_size, L = c.num_hidden_layers;
    for (int64_t l = 0; l <= L; ++l) resid.emplace_back(std::array<int64_t, 2>{t, C});
    for (int64_t l = 0; l < L; ++l) {
      h1.emplace_back(std::array<int64_t, 2>{t, C});
      mid.emplace_back(std::array<int64_t, 2>{t, C});
      h2.emplace_back(std::array<int64_t, 2>{t, C});
      gate_up.emplace_back(std::array<int64_t, 2>{t, 2 * F});
      m.emplace_back(std::array<int64_t, 2>{t, F});
      rstd1.emplace_back(static_cast<size_t>(t));
      rstd2.emplace_back(static_cast<size_t>(t));
      block.emplace_back(bo, t);
    }
    hf = Tensor<float, 2>({t, C});
    rstdf.resize(static_cast<size_t>(t));
    losses.resize(static_cast<size_t>(t));
    lse.resize(static_cast<size_t>(t));
    tmp = Tensor<float, 2>({t, C});
    d_resid = Tensor<float, 2>({t, C});
    d_mid = Tensor<float, 2>({t, C});
    d_h = Tensor<float, 2>({t, C});
    d_gate_up = Tensor<float, 2>({t, 2 * F});
    d_m = Tensor<float, 2>({t, F});
  }
  int64_t tokens;
  std::vector<int32_t> ids, targets, cu;
  std::vector<int64_t> positions;
  // gate_up[l] = [gate | up] as one [T, 2F] product (gate_proj and up_proj rows are consecutive
  // in the layout: one [2F, C] matrix); gate(l), up(l) are its two column halves.
  std::vector<Tensor<float, 2>> resid, h1, mid, h2, gate_up, m;
  std::vector<std::vector<float>> rstd1, rstd2;
  std::vector<AttentionBlockWorkspace> block;
  Tensor<float, 2> hf, tmp, d_resid, d_mid, d_h, d_gate_up, d_m;
  std::vector<float> rstdf, losses, lse;
  bool has_loss = false;
  View2 gate(size_t l) { return columns(gate_up[l], 0); }
  View2 up(size_t l) { return columns(gate_up[l], 1); }
  View2 d_gate() { return columns(d_gate_up, 0); }
  View2 d_up() { return columns(d_gate_up, 1); }

 private:
  // Half `half` (0: left, 1: right) of the columns of a [T, 2F] tensor, as a [T, F] view.
  static View2 columns(Tensor<float, 2>& x, int64_t half) {
    const int64_t f = x.shape()[1] / 2;
    return {x.data() + half * f, {x.shape()[0], f}, {x.shape()[1], 1}};
  }
};

namespace {

// y = a + b (same shapes, rows contiguous; y may be a or b), rows in parallel.
void add_inplace(View2 y, ConstView2 a, ConstView2 b) {
  check(y.inner_contiguous() && a.inner_contiguous() && b.inner_contiguous(),
        "add_inplace: rows must be contiguous");
  const int64_t c = y.shape[1];
  nn::parallel_each_row(y.shape[0], c, [&](int64_t t) {
    float* yr = y.ptr(t);
    const float *ar = a.ptr(t), *br = b.ptr(t);
    for (int64_t j = 0; j < c; ++j) yr[j] = ar[j] + br[j];
  });
}

// x [T, C] (contiguous) ← its sum over the tensor-parallel shards; nothing without a hook.
void shard_sum(const std::function<void(std::span<float>)>& sum, Tensor<float, 2>& x) {
  if (sum) sum({x.data(), size_t(x.numel())});
}

}  // namespace

GptModel::GptModel(const GptConfig& config) : ParameterModel("GptModel"), config_(config) {
  validate(config_);
  build_layout();
}
GptModel::~GptModel() = default;
GptModel::GptModel(GptModel&&) noexcept = default;
GptModel& GptModel::operator=(GptModel&&) noexcept = default;

std::string GptModel::layer_name(int64_t l, const char* rest) {
  return "model.layers." + std::to_string(l) + "." + rest;
}

std::vector<ParameterInfo> gpt_parameter_layout(const GptConfig& c) {
  const int64_t C = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads,
                D = c.head_dim, F = c.intermediate_size, V = c.vocab_size;
  std::vector<ParameterInfo> info;
  int64_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    info.push_back({std::move(name), std::move(shape), offset, n});
    offset += n;
  };
  auto layer_name = [](int64_t l, const char* rest) { return GptModel::layer_name(l, rest); };
  add("model.embed_tokens.weight", {V, C});
  const int64_t gate_width = c.gate == GateMode::kHeadwise ? H : H * D;  // Hg
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    add(layer_name(l, "input_layernorm.weight"), {C});
    add(layer_name(l, "self_attn.q_proj.weight"), {H * D, C});  // q, k, v rows are consecutive:
    add(layer_name(l, "self_attn.k_proj.weight"), {Hkv * D, C});  // one fused [(H+2Hkv)·D, C]
    add(layer_name(l, "self_attn.v_proj.weight"), {Hkv * D, C});
    if (c.attention_bias) {
      add(layer_name(l, "self_attn.q_proj.bias"), {H * D});
      add(layer_name(l, "self_attn.k_proj.bias"), {Hkv * D});
      add(layer_name(l, "self_attn.v_proj.bias"), {Hkv * D});
    }
    add(layer_name(l, "self_attn.o_proj.weight"), {C, H * D});
    if (c.sink_logits == SinkLogits::kLearned) add(layer_name(l, "self_attn.sinks"), {H});
    if (c.gate != GateMode::kNone) {
      const int64_t in = c.gate_source == GateSource::kInput ? C : D;
      add(layer_name(l, "self_attn.output_gate.weight"), {gate_width, in});
      add(layer_name(l, "self_attn.output_gate.bias"), {gate_width});
    }
    add(layer_name(l, "post_attention_layernorm.weight"), {C});
    add(layer_name(l, "mlp.gate_proj.weight"), {F, C});  // gate, up rows are consecutive:
    add(layer_name(l, "mlp.up_proj.weight"), {F, C});    // one fused [2F, C]
    add(layer_name(l, "mlp.down_proj.weight"), {C, F});
  }
  add("model.norm.weight", {C});
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, C});
  return info;
}

void GptModel::build_layout() {
  const auto& c = config_;
  for (ParameterInfo& p : gpt_parameter_layout(c)) store_.add(std::move(p.name), std::move(p.shape));
  store_.allocate();
  const auto& s = store_;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    auto id = [&](const char* rest) { return s.find(layer_name(l, rest)); };
    AttentionIds attn{.qkv_weight = id("self_attn.q_proj.weight"),
                      .qkv_bias = id("self_attn.q_proj.bias"),
                      .qkv_rows = (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim,
                      .o_proj = {id("self_attn.o_proj.weight"), {}},
                      .gate_proj = {id("self_attn.output_gate.weight"), id("self_attn.output_gate.bias")},
                      .sinks = id("self_attn.sinks")};
    layers_.push_back({id("input_layernorm.weight"), id("post_attention_layernorm.weight"),
                       id("mlp.gate_proj.weight"), id("mlp.up_proj.weight"), id("mlp.down_proj.weight"), attn});
    const LayerIds& ly = layers_.back();  // the fused gate/up product relies on the layout
    check(s.matrix(ly.gate_proj).data + c.intermediate_size * c.hidden_size == s.matrix(ly.up_proj).data,
          "GptModel: layer ", l, ": mlp.up_proj must follow mlp.gate_proj in the parameter layout");
  }
  embed_ = s.id("model.embed_tokens.weight");
  final_norm_ = s.id("model.norm.weight");
  head_ = c.tie_word_embeddings ? embed_ : s.id("lm_head.weight");
}

AttentionBlockOptions GptModel::block_options() const {
  const auto& c = config_;
  AttentionBlockOptions o;
  o.heads = c.num_attention_heads;
  o.kv_heads = c.num_key_value_heads;
  o.head_dim = c.head_dim;
  o.rope_theta = c.rope_theta;
  o.causal = true;
  o.window_left = int(c.window);
  o.window_right = 0;
  o.sink_logits = c.sink_logits;
  o.gate = c.gate;
  o.gate_source = c.gate_source;
  o.gate_bias = true;
  o.qkv_bias = c.attention_bias;
  o.o_bias = false;
  return o;
}

AttentionBlockParams GptModel::block_params(int64_t l) const {
  return attention_params(store_, layers_[size_t(l)].attn);
}

void GptModel::init_random(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const float resid_scale = 1.0f / std::sqrt(2.0f * float(config_.num_hidden_layers));
  for (const auto& p : store_.info()) {
    float* x = store_.parameters().data() + p.offset;
    const bool norm = p.name.find("layernorm") != std::string::npos || p.name == "model.norm.weight";
    const bool zero = p.shape.size() == 1 && !norm;  // biases and sinks
    const bool resid = p.name.find("o_proj") != std::string::npos || p.name.find("down_proj") != std::string::npos;
    for (int64_t i = 0; i < p.numel; ++i)
      x[i] = norm ? 1.0f : zero ? 0.0f : normal(rng) * (resid ? resid_scale : 1.0f);
  }
}

AttentionBlockCache GptModel::attention_cache(int64_t layer) {
  check(acts_ != nullptr, "GptModel.attention_cache: call logits() or forward() first");
  check(layer >= 0 && layer < config_.num_hidden_layers, "GptModel.attention_cache: layer ", layer,
        " out of range [0, ", config_.num_hidden_layers, ")");
  return acts_->block[size_t(layer)].cache();
}

ConstView2 GptModel::residual(int64_t layer) const {
  check(acts_ != nullptr, "GptModel.residual: call logits() or forward() first");
  check(layer >= 0 && layer <= config_.num_hidden_layers, "GptModel.residual: layer ", layer,
        " out of range [0, ", config_.num_hidden_layers, "]");
  return acts_->resid[size_t(layer)].view();
}

void GptModel::run_layers(const GptBatch& batch) {
  const auto& c = config_;
  const int64_t t = int64_t(batch.tokens.size()), F = c.intermediate_size;
  check(t >= 1, "GptModel: batch has no tokens");
  if (!acts_ || acts_->tokens != t) {
    acts_.reset();  // free the old buffers before allocating the new ones
    acts_ = std::make_unique<GptActivations>(c, block_options(), t);
  }
  GptActivations& a = *acts_;
  a.ids.assign(batch.tokens.begin(), batch.tokens.end());
  a.cu.assign(batch.cu_seqlens.begin(), batch.cu_seqlens.end());
  if (a.cu.empty()) a.cu = {0, int32_t(t)};
  check(a.cu.front() == 0 && a.cu.back() == t, "GptModel: cu_seqlens must run from 0 to ", t);
  a.positions.assign(static_cast<size_t>(t), 0);
  for (size_t b = 0; b + 1 < a.cu.size(); ++b) {
    check(a.cu[b + 1] >= a.cu[b], "GptModel: cu_seqlens must be non-decreasing");
    for (int32_t i = a.cu[b]; i < a.cu[b + 1]; ++i) a.positions[size_t(i)] = i - a.cu[b];
  }
  const AttentionBlockBatch bb{a.cu, a.positions};
  const AttentionBlockOptions bo = block_options();
  const float eps = float(c.rms_norm_eps);
  embedding_forward(a.resid[0].view(), a.ids, store_.matrix(embed_));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerIds& ly = layers_[size_t(l)];
    rms_norm_forward(a.h1[size_t(l)].view(), a.rstd1[size_t(l)], a.resid[size_t(l)].view(),
                     store_.vec(ly.input_norm), eps);
    attention_block_forward(a.tmp.view(), a.block[size_t(l)].cache(), a.h1[size_t(l)].view(), bb,
                            block_params(l), bo);
    shard_sum(tp_sum_, a.tmp);  // g: the shards' o_proj outputs add up to the whole model's
    add_inplace(a.mid[size_t(l)].view(), a.resid[size_t(l)].view(), a.tmp.view());
    rms_norm_forward(a.h2[size_t(l)].view(), a.rstd2[size_t(l)], a.mid[size_t(l)].view(),
                     store_.vec(ly.post_norm), eps);
    linear_forward(a.gate_up[size_t(l)].view(), a.h2[size_t(l)].view(), store_.matrix(ly.gate_proj, 2 * F), {});
    swiglu_forward(a.m[size_t(l)].view(), a.gate(size_t(l)), a.up(size_t(l)));
    linear_forward(a.tmp.view(), a.m[size_t(l)].view(), store_.matrix(ly.down_proj), {});
    shard_sum(tp_sum_, a.tmp);  // g: likewise down_proj's
    add_inplace(a.resid[size_t(l + 1)].view(), a.mid[size_t(l)].view(), a.tmp.view());
  }
  rms_norm_forward(a.hf.view(), a.rstdf, a.resid[size_t(c.num_hidden_layers)].view(),
                   store_.vec(final_norm_), eps);
}

void GptModel::logits(const GptBatch& batch, View2 out) {
  run_layers(batch);
  acts_->has_loss = false;
  logits_forward(out, acts_->hf.view(), store_.matrix(head_), {});
}

float GptModel::forward(const GptBatch& batch, std::span<const int32_t> targets) {
  check(targets.size() == batch.tokens.size(), "GptModel.forward: targets must have one entry per token (",
        batch.tokens.size(), "), got ", targets.size());
  run_layers(batch);
  GptActivations& a = *acts_;
  a.targets.assign(targets.begin(), targets.end());
  const float loss = linear_cross_entropy_forward(a.losses, a.lse, a.hf.view(), store_.matrix(head_), {}, a.targets);
  a.has_loss = true;
  return loss;
}

void GptModel::backward(float d_loss) {
  check(acts_ && acts_->has_loss, "GptModel.backward: call forward() first");
  GptActivations& a = *acts_;
  const auto& c = config_;
  const int64_t F = c.intermediate_size;
  const AttentionBlockBatch bb{a.cu, a.positions};
  const AttentionBlockOptions bo = block_options();
  linear_cross_entropy_backward(a.d_h.view(), store_.grad_matrix(head_), {}, a.hf.view(), store_.matrix(head_), {},
                                a.targets, a.lse, d_loss);
  rms_norm_backward(a.d_resid.view(), store_.grad_vec(final_norm_), a.d_h.view(),
                    a.resid[size_t(c.num_hidden_layers)].view(), store_.vec(final_norm_), a.rstdf);
  for (int64_t l = c.num_hidden_layers - 1; l >= 0; --l) {
    const size_t i = size_t(l);
    const LayerIds& ly = layers_[i];
    // resid[l+1] = mid + down(swiglu(gate(h2), up(h2))), h2 = rmsnorm(mid)
    linear_backward(a.d_m.view(), store_.grad_matrix(ly.down_proj), {}, a.d_resid.view(),
                    a.m[i].view(), store_.matrix(ly.down_proj));
    swiglu_backward(a.d_gate(), a.d_up(), a.d_m.view(), a.gate(i), a.up(i));
    // d_h = d_gate·W_gate + d_up·W_up: one product over the fused [2F, C] weight.
    linear_backward(a.d_h.view(), store_.grad_matrix(ly.gate_proj, 2 * F), {}, a.d_gate_up.view(),
                    a.h2[i].view(), store_.matrix(ly.gate_proj, 2 * F));
    shard_sum(tp_sum_, a.d_h);  // f: h2 feeds every shard's gate/up rows
    // d_mid = d_resid (the skip path) + the MLP path through the norm.
    rms_norm_backward(a.d_mid.view(), store_.grad_vec(ly.post_norm), a.d_h.view(),
                      a.mid[i].view(), store_.vec(ly.post_norm), a.rstd2[i], a.d_resid.view());
    // mid = resid[l] + attention_block(h1), h1 = rmsnorm(resid[l])
    attention_block_backward(a.d_h.view(), attention_grads(store_, ly.attn), a.block[i].scratch(), a.d_mid.view(),
                             a.h1[i].view(), a.block[i].cache(), bb, block_params(l), bo);
    shard_sum(tp_sum_, a.d_h);  // f: h1 feeds every shard's q/k/v (and gate) rows
    rms_norm_backward(a.d_resid.view(), store_.grad_vec(ly.input_norm), a.d_h.view(),
                      a.resid[i].view(), store_.vec(ly.input_norm), a.rstd1[i], a.d_mid.view());
  }
  embedding_backward(store_.grad_matrix(embed_), a.ids, a.d_resid.view());
}

void GptModel::save(const std::string& dir) const {
  store_.save(dir, gpt_config_to_json(config_));
}

GptModel GptModel::load(const std::string& dir) {
  return load_model_dir<GptModel>(dir, parse_gpt_config, "GptModel.load");
}

}  // namespace attnkit
