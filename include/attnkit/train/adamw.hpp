#pragma once
// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019), step for step
// as torch.optim.AdamW in PyTorch 1.13 (amsgrad=False, maximize=False), in float32:
//   p ← p · (1 − lr·wd)                       (decoupled decay, before the moments, as torch)
//   m ← β1·m + (1 − β1)·g ;  v ← β2·v + (1 − β2)·g²
//   p ← p − lr/(1 − β1^t) · m / (sqrt(v)/sqrt(1 − β2^t) + eps)
// Parameters are named float32 spans with gradient spans of the same length; wd is 0 for the
// parameters a predicate excludes (by default biases and normalisation weights, as nanoGPT and
// llm.c do). Moments are exposed by name for checkpoints (safetensors).
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;           // added to sqrt(v̂), as torch
  double weight_decay = 0.01;  // torch's default; applies to parameters not excluded
};

// One parameter: values updated in place by step(), gradients read by it.
struct NamedParameter {
  std::string name;
  std::span<float> value;       // [n]
  std::span<const float> grad;  // [n]
};

// A model's tensors as AdamW parameters (name, value and gradient slices of its flat buffers), for
// any model with parameter_info() (name, offset, numel), parameters() and gradients(). Tied
// tensors appear once, as in the layout.
template <class Model>
std::vector<NamedParameter> named_parameters(Model& model) {
  std::vector<NamedParameter> out;
  const std::span<float> p = model.parameters();
  const std::span<const float> g = model.gradients();
  for (const auto& t : model.parameter_info())
    out.push_back({t.name, p.subspan(size_t(t.offset), size_t(t.numel)), g.subspan(size_t(t.offset), size_t(t.numel))});
  return out;
}

// True for parameters to exclude from weight decay; given the parameter's name.
using NoDecayPredicate = std::function<bool(std::string_view name)>;

// Default exclusion: names whose last '.'-component is "bias", that contain "norm" in any case
// ("input_layernorm.weight", "LayerNorm.weight", "model.norm.weight"), or that have a component
// starting with "ln_" (GPT-2's "h.0.ln_1.weight", "ln_f.weight").
bool is_bias_or_norm(std::string_view name);

// An optimizer state tensor: "<param>.exp_avg" (m) or "<param>.exp_avg_sq" (v), float32 [n].
struct OptimizerStateTensor {
  std::string name;
  std::span<float> data;
};

class AdamW {
 public:
  // Validates names (non-empty, unique) and sizes (value.size() == grad.size()); moments start
  // at zero, step_count() at 0. An empty `no_decay` excludes nothing (torch's default).
  explicit AdamW(std::vector<NamedParameter> params, const AdamWOptions& options = {},
                 const NoDecayPredicate& no_decay = is_bias_or_norm);

  // One update of every parameter from its current gradient with learning rate `lr` (e.g. from
  // warmup_cosine_lr); increments step_count() first, so the first step uses t = 1. Refused
  // (attnkit::Error) while a WeightPackScope is open on the calling thread (weight_pack_cache.hpp).
  void step(double lr);

  // Steps taken so far (t of the last update); part of a checkpoint.
  int64_t step_count() const { return step_; }
  // Sets the step counter (resume); must be >= 0.
  void set_step_count(int64_t step);
  const AdamWOptions& options() const { return options_; }
  const std::vector<NamedParameter>& parameters() const { return params_; }
  // Whether parameter i gets weight decay (false if the predicate excluded it).
  bool decays(size_t i) const { return decays_.at(i) != 0; }

  // Mutable views of the moments, m then v for each parameter in order (for checkpoints).
  std::vector<OptimizerStateTensor> state();
  // Writes the moments to a safetensors file (F32 [n] each) with metadata {"step": "<t>"}.
  void save_state(const std::string& path) const;
  // Reads moments and step written by save_state; every parameter's m and v must be present
  // with n elements. Throws attnkit::Error (nothing changes) otherwise.
  void load_state(const std::string& path);

 private:
  struct Chunk {
    size_t param;
    size_t begin, end;  // element range within the parameter
  };
  std::vector<NamedParameter> params_;
  AdamWOptions options_;
  std::vector<char> decays_;
  std::vector<std::vector<float>> exp_avg_, exp_avg_sq_;
  std::vector<Chunk> chunks_;  // units of parallel work; the result does not depend on them
  int64_t step_ = 0;
};

}  // namespace attnkit
