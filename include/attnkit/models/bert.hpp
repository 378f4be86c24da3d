#pragma once
// BERT (Devlin et al. 2019): a bidirectional post-LN transformer encoder with task heads, forward
// and backward the llm.c way (layers in order, then their backwards in reverse, every saved
// activation explicit). Parameters and gradients each live in one flat float buffer addressed by
// Hugging Face BERT tensor names:
//   bert.embeddings.{word,position,token_type}_embeddings.weight [V | P | TT, C]
//   bert.embeddings.LayerNorm.{weight,bias} [C]
//   bert.encoder.layer.N.attention.self.{query,key,value}.{weight [C, C], bias [C]}
//       (the three weights are consecutive rows of one fused [3C, C] matrix, the biases one [3C])
//   bert.encoder.layer.N.attention.output.dense.{weight [C, C], bias}, ...output.LayerNorm.*
//   bert.encoder.layer.N.intermediate.dense.{weight [F, C], bias [F]}
//   bert.encoder.layer.N.output.dense.{weight [C, F], bias [C]}, ...output.LayerNorm.*
//   bert.pooler.dense.{weight, bias}                          (PreTraining, SequenceClassification)
//   cls.predictions.transform.dense.*, cls.predictions.transform.LayerNorm.*, cls.predictions.bias
//       [V] (the decoder weight is tied to the word embeddings and not stored)
//   cls.seq_relationship.{weight [2, C], bias}                (NSP), classifier.* [K, C] (sequence
//   or token classification), qa_outputs.* [2, C] (span start/end)
//
// Encoder (per layer, post-LN):  a = attn(x) (bidirectional, biases, no RoPE; attention dropout)
//   h = LN(x + drop(a));  x' = LN(h + drop(W_o·gelu(W_i·h + b_i) + b_o))
// Embeddings: x₀ = drop(LN(word[id] + position[pos] + token_type[tt])).
// Attention runs over the segments of cu_seqlens: a token attends only to its own segment, so
// padding (given its own segments) and other packed sequences are never seen. Positions restart
// at 0 in every segment. PyTorch: tests/python/test_bert.py writes the same network in torch.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnkit/core/tensor.hpp"
#include "attnkit/models/bert_config.hpp"
#include "attnkit/models/encoder_layer.hpp"
#include "attnkit/models/parameter_info.hpp"
#include "attnkit/models/parameter_model.hpp"
#include "attnkit/nn/attention_block.hpp"

namespace attnkit {

// How the T tokens of a call form sequences.
struct BertBatch {
  std::span<const int32_t> tokens;          // [T] ids in [0, V)
  std::span<const int32_t> token_type_ids;  // [T] in [0, type_vocab_size), or empty (all 0)
  std::span<const int32_t> cu_seqlens;      // [S+1] attention segments from 0 to T, or empty (one)
  std::span<const int32_t> sequences;       // [B] segment index of each real sequence, ascending
                                            // (its first token is [CLS]); empty = every segment
};

// Targets of the heads; an empty span means "no such loss". -1 means "ignore" in per-token spans.
struct BertTargets {
  std::span<const int32_t> mlm;              // [T] original token at selected positions, else -1
  std::span<const int32_t> nsp;              // [B] 0 = segment B follows A, 1 = random B (HF)
  std::span<const int32_t> labels;           // [B] sequence class, or [T] token class (-1 ignore)
  std::span<const int32_t> start_positions;  // [B] span start, index within the sequence
  std::span<const int32_t> end_positions;    // [B] span end (inclusive), index within the sequence
};

// Mean losses of the last forward (0 for absent heads); total = mlm + nsp + task.
struct BertLosses {
  float total = 0, mlm = 0, nsp = 0, task = 0;
  int64_t mlm_count = 0;  // positions that carried an MLM loss
};

class BertActivations;  // defined in bert.cpp: saved activations for one batch shape

class BertModel : public ParameterModel {
 public:
  // A model with all parameters zero (call init_random or load weights).
  explicit BertModel(const BertConfig& config);
  ~BertModel();
  BertModel(BertModel&&) noexcept;
  BertModel& operator=(BertModel&&) noexcept;

  const BertConfig& config() const { return config_; }

  // N(0, 0.02) for matrices and embeddings, ones for LayerNorm weights, zeros for biases (HF's
  // _init_weights); deterministic in seed.
  void init_random(uint64_t seed);
  // Loads config.json + model.safetensors from dir. Every tensor this architecture needs must be
  // present with the right shape; extra tensors (e.g. cls.predictions.decoder.weight) are ignored.
  static BertModel load(const std::string& dir);
  // Copies every tensor of `other` whose name and shape exist here (encoder and pooler when
  // fine-tuning a pretrained model); returns how many were copied.
  int64_t copy_matching(const BertModel& other);
  // Writes config.json and model.safetensors to dir atomically (temporary file + rename).
  void save(const std::string& dir) const;

  // Training mode turns dropout on, keyed by `seed` (use a new seed per step); eval mode is the
  // default and is deterministic.
  void set_training(bool training, uint64_t seed = 0);

  // Runs the encoder and every head a target asks for (and the task head's logits); keeps the
  // activations for backward(). Returns the mean losses.
  BertLosses forward(const BertBatch& batch, const BertTargets& targets = {});
  // Adds (+=) the gradient of the last forward's total loss (times d_loss) into gradients().
  void backward(float d_loss = 1.0f);

  // Outputs of the last forward: final hidden states [T, C]; pooled [CLS] vectors [B, C] (models
  // with a pooler); task logits: NSP [B, 2], sequence classes [B, K], token classes [T, K],
  // span [T, 2] (column 0 start, 1 end).
  ConstView2 sequence_output() const;
  ConstView2 pooled_output() const;
  ConstView2 task_logits() const;
  // MLM logits [T, V] of every token of the last forward (transform + tied decoder + bias).
  void mlm_logits(View2 out);

 private:
  void build_layout();
  void resolve_ids();  // the handles below, from the names
  void run_encoder(const BertBatch& batch);
  void run_heads(const BertTargets& targets, BertLosses& losses);
  void encoder_backward();
  void heads_backward(float d_loss);
  AttentionBlockOptions block_options(int64_t layer) const;
  std::string layer_prefix(int64_t layer) const;  // "bert.encoder.layer.<layer>."
  float dropout_p() const;

  BertConfig config_;
  std::vector<EncoderLayerIds> layers_;
  TensorId word_, position_, token_type_, mlm_bias_;
  LayerIds emb_norm_, pooler_, mlm_dense_, mlm_norm_;
  LayerIds head_;  // cls.seq_relationship, classifier or qa_outputs (absent for BertForMaskedLM)
  bool training_ = false;
  uint64_t seed_ = 0;
  std::unique_ptr<BertActivations> acts_;
};

// Number of parameters of the model a config describes.
int64_t bert_parameter_count(const BertConfig& config);

}  // namespace attnkit
