#pragma once
// GPT: a decoder-only transformer in the Llama architecture (RMSNorm, RoPE, GQA attention with
// optional gates/sinks/window, SwiGLU MLP, tied or separate LM head), forward and backward the
// llm.c way: layers are called in order, then their backwards in reverse, with every saved
// activation in an explicit GptActivations. Parameters and gradients each live in one flat
// float buffer (so an optimizer sees one span), addressed by Hugging Face Llama tensor names:
//   model.embed_tokens.weight [V, C]
//   model.layers.N.input_layernorm.weight [C]
//   model.layers.N.self_attn.{q,k,v}_proj.weight [H·D | Hkv·D, C]  (contiguous rows of one fused
//                                                                    qkv matrix: q, then k, then v)
//   model.layers.N.self_attn.o_proj.weight [C, H·D]
//   model.layers.N.self_attn.sinks [H]                      (learned sinks; gpt-oss's name)
//   model.layers.N.self_attn.output_gate.{weight,bias}      (attnkit's gate, if configured)
//   model.layers.N.post_attention_layernorm.weight [C]
//   model.layers.N.mlp.{gate,up}_proj.weight [F, C], mlp.down_proj.weight [C, F]  (gate and up
//                                                    are contiguous rows of one fused [2F, C] matrix)
//   model.norm.weight [C], lm_head.weight [V, C] (absent when tie_word_embeddings)
// PyTorch: tests/python/test_gpt.py writes the same network in torch.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnkit/core/tensor.hpp"
#include "attnkit/models/attention_ids.hpp"
#include "attnkit/models/gpt_config.hpp"
#include "attnkit/models/parameter_info.hpp"
#include "attnkit/models/parameter_model.hpp"
#include "attnkit/nn/attention_block.hpp"

namespace attnkit {

// How the T tokens of a call form sequences: cu_seqlens [B+1] (empty: one sequence).
struct GptBatch {
  std::span<const int32_t> tokens;      // [T] ids in [0, V)
  std::span<const int32_t> cu_seqlens;  // [B+1] or empty
};

// The flat parameter buffer's tensors for `config`, in buffer order (what GptModel allocates).
std::vector<ParameterInfo> gpt_parameter_layout(const GptConfig& config);

class GptActivations;  // defined in gpt.cpp: saved activations for one batch shape

class GptModel : public ParameterModel {
 public:
  // A model with all parameters zero (call init_random or load weights).
  explicit GptModel(const GptConfig& config);
  ~GptModel();
  GptModel(GptModel&&) noexcept;
  GptModel& operator=(GptModel&&) noexcept;

  const GptConfig& config() const { return config_; }

  // "model.layers.<layer>.<rest>": the Hugging Face name of a layer's tensor.
  static std::string layer_name(int64_t layer, const char* rest);
  // The named 2-D tensor / 1-D tensor as a view of the parameter buffer; throws if unknown
  // (a look-up by name: forward and backward use the handles resolved at construction).
  ConstView2 matrix(const std::string& name) const { return store_.matrix(name); }
  std::span<const float> vec(const std::string& name) const { return store_.parameter(name); }
  // The attention block's options and its weights in layer `layer` (q/k/v rows fused).
  AttentionBlockOptions block_options() const;
  AttentionBlockParams block_params(int64_t layer) const;

  // GPT-2 style initialisation: N(0, 0.02) for matrices (output projections scaled by
  // 1/sqrt(2L)), ones for norm weights, zeros for biases and sinks; deterministic in seed.
  void init_random(uint64_t seed);
  // Loads config.json + model.safetensors from dir (Hugging Face Llama names); throws on a
  // missing, extra-shaped or malformed tensor.
  static GptModel load(const std::string& dir);
  // Writes config.json and model.safetensors to dir atomically (temporary file + rename).
  void save(const std::string& dir) const;

  // logits [T, V] for the batch (no gradients kept).
  void logits(const GptBatch& batch, View2 logits);
  // Mean next-token cross-entropy over targets >= 0 ([T], -1 = ignore); keeps activations for
  // backward().
  float forward(const GptBatch& batch, std::span<const int32_t> targets);
  // Adds (+=) the gradient of the last forward's loss (times d_loss) into gradients().
  void backward(float d_loss = 1.0f);
  // Tensor parallelism (Megatron-LM's f and g operators) for a model that is one shard of a
  // whole model (gpt_tensor_parallel_shard): `sum` replaces x [n] in place by its sum over the
  // shards (an MPI all-reduce). forward()/logits() sum the attention and MLP outputs [T, C]
  // before each residual add; backward() sums the gradients [T, C] w.r.t. the normed inputs of
  // the column-parallel projections (q/k/v and gate of the attention, gate/up of the MLP).
  // There are no row-parallel biases (o_proj and down_proj have none), so nothing is counted
  // twice. Empty (the default): one process, no reduction.
  void set_tensor_parallel_sum(std::function<void(std::span<float>)> sum) { tp_sum_ = std::move(sum); }
  // The attention block's saved activations of layer `layer` from the last logits()/forward():
  // qkv [T, (H + 2·Hkv)·D] after RoPE, attn [T, H·D] before the gate, lse [H, T], gate [T, Hg]
  // (sigmoid values; empty without a gate). Throws attnkit::Error before any forward.
  AttentionBlockCache attention_cache(int64_t layer);
  // The residual stream [T, C] entering layer `layer` from the last logits()/forward(); layer L
  // is the last layer's output (before the final norm). Throws attnkit::Error before any forward.
  ConstView2 residual(int64_t layer) const;

 private:
  struct LayerIds {  // one decoder layer's tensors, resolved once
    TensorId input_norm, post_norm, gate_proj, up_proj, down_proj;
    AttentionIds attn;
  };
  void build_layout();
  void run_layers(const GptBatch& batch);  // embedding → layers → final norm, into activations

  GptConfig config_;
  std::vector<LayerIds> layers_;
  TensorId embed_, final_norm_, head_;  // head_ is embed_ when tie_word_embeddings
  std::unique_ptr<GptActivations> acts_;  // rebuilt when the token count changes
  std::function<void(std::span<float>)> tp_sum_;  // empty: not a tensor-parallel shard
};

}  // namespace attnkit
