#pragma once
// Tensor-parallel shard of a GptModel (Megatron-LM's split of a transformer layer): shard r of P
// owns query heads [r·H/P, (r+1)·H/P), the KV heads those heads read (Hkv/P of them when
// Hkv % P == 0; one KV head, replicated on P/Hkv shards, when P % Hkv == 0), their rows of
// q/k/v_proj (and biases, sinks, gates), their columns of o_proj, and the slice
// [r·F/P, (r+1)·F/P) of the MLP (rows of gate/up_proj, columns of down_proj). Embedding, norms
// and LM head are replicated. Summing the shards' o_proj outputs (and down_proj outputs) gives
// the whole model's: that sum is the all-reduce of tensor-parallel inference and training.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "attnkit/models/gpt.hpp"

namespace attnkit {

// Query heads and KV heads owned by one shard: [head_begin, head_end), [kv_begin, kv_end).
struct GptShardRange {
  int64_t head_begin = 0, head_end = 0, kv_begin = 0, kv_end = 0, ffn_begin = 0, ffn_end = 0;
};

// The ranges of shard `rank` of `ranks`; throws attnkit::Error naming --tp unless H % P == 0,
// (Hkv % P == 0 or P % Hkv == 0) and F >= P.
GptShardRange gpt_shard_range(const GptConfig& config, int64_t rank, int64_t ranks);
// Shard `rank` of `ranks` as a model of its own (H/P heads, its KV heads, F slice), weights copied.
GptModel gpt_tensor_parallel_shard(const GptModel& full, int64_t rank, int64_t ranks);

// One contiguous run of a shard's flat parameter buffer (GptModel::parameters() of the shard)
// and where the same values live in the whole model's flat buffer. `replicated`: other shards
// hold the same values too (embedding, norms, LM head; a KV head's k/v rows when Hkv < P);
// `counted`: this shard is the first holder (so a sum over shards counts each value once);
// `kv`: k/v_proj rows (weight or bias). Runs are in shard-buffer order and cover it exactly.
struct GptShardRun {
  int64_t shard_offset = 0, full_offset = 0, size = 0;
  bool replicated = false, counted = true, kv = false;
};
// The runs of shard `rank` of `ranks` (gpt_shard_range's rules; throws the same errors).
std::vector<GptShardRun> gpt_shard_layout(const GptConfig& full, int64_t rank, int64_t ranks);

// Training state of a tensor-parallel shard, from its layout (no MPI: `sum` is the all-reduce).
// Sums the k/v_proj gradients over the shards that hold the same KV head (when Hkv < P each
// replica saw only its own query heads' share), so replicas take identical optimizer steps.
// `grads` is the shard's flat gradient buffer; every shard must call this (it is collective).
void gpt_shard_sum_replicated_kv(std::span<float> grads, const GptConfig& full, int64_t rank, int64_t ranks,
                                 const std::function<void(std::span<float>)>& sum);
// Σ g² over this shard's counted values (each whole-model value is counted on exactly one
// shard); the sum over shards is the whole model's squared gradient norm. Double accumulation.
double gpt_shard_grad_sq_sum(std::span<const float> grads, const std::vector<GptShardRun>& layout);
// full[run.full_offset + i] = shard[run.shard_offset + i] for every run (flat buffers in
// parameter layout: weights, gradients or optimizer moments). Called for shards 0..P-1 in order,
// returns the largest |difference| between this shard's non-counted replicated values and what
// their first holder (a lower rank) wrote: 0 when the replicas agree. (A NaN difference is not
// reported; callers check finiteness separately.)
float gpt_shard_to_full(std::span<float> full, std::span<const float> shard, const std::vector<GptShardRun>& layout);
// shard[run.shard_offset + i] = full[run.full_offset + i] for every run.
void gpt_shard_from_full(std::span<float> shard, std::span<const float> full, const std::vector<GptShardRun>& layout);

}  // namespace attnkit
