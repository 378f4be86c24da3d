#pragma once
// MHA → GQA checkpoint conversion (Ainslie et al. 2023, "GQA: Training Generalized Multi-Query
// Transformer Models from Multi-Head Checkpoints"): the K and V projections of each group of
// contiguous KV heads are pooled into one KV head, so query head i reads new KV head i / (H / N).
//
//   mean:   W_K^(g) = (1/m) Σ_{j in group g} W_K^(j)   (rows of head j: [j·D, (j+1)·D) of k_proj)
//   first:  W_K^(g) = W_K^(first head of group g)
//   random: W_K^(g) = W_K^(one head of group g), drawn from Philox(seed; layer, g); K and V
//           of a group take the same head.
// The same rule applies to v_proj and to k/v biases when present. PyTorch equivalent for mean:
//   w.view(N, m, D, C).mean(dim=1).reshape(N * D, C)
// The input may already be GQA (Hkv0 KV heads): then N must divide Hkv0 and a group is m = Hkv0/N
// old KV heads. Works on any Llama-named checkpoint directory (config.json + model.safetensors):
// tensors other than *.self_attn.{k,v}_proj.{weight,bias} and config keys other than
// num_key_value_heads are copied unchanged (tensors byte for byte, in their own dtype).
#include <cstdint>
#include <string>

namespace attnkit {

enum class GqaPoolMethod { mean, first, random };

struct ConvertGqaOptions {
  int64_t kv_heads = 1;                  // N, the new number of KV heads
  GqaPoolMethod method = GqaPoolMethod::mean;
  uint64_t seed = 0;                     // for method random
};

// Parses "mean" | "first" | "random"; throws attnkit::Error naming `arg`.
GqaPoolMethod parse_gqa_pool_method(const std::string& name, const char* arg = "--method");

// Reads in_dir/{config.json, model.safetensors} and writes out_dir/{config.json,
// model.safetensors} (atomically) with N KV heads. Throws attnkit::Error, before writing
// anything, if N does not divide the checkpoint's KV heads, if out_dir equals or lies inside
// in_dir, if out_dir exists and is not an empty directory, or if a K/V tensor's shape does not
// match the config.
void convert_gqa(const std::string& in_dir, const std::string& out_dir, const ConvertGqaOptions& options);

}  // namespace attnkit
