#pragma once
// Tensor-parallel shard of a GptModel (Megatron-LM's split of a transformer layer): shard r of P
// owns query heads [r·H/P, (r+1)·H/P), the KV heads those heads read (Hkv/P of them when
// Hkv % P == 0; one KV head, replicated on P/Hkv shards, when P % Hkv == 0), their rows of
// q/k/v_proj (and biases, sinks, gates), their columns of o_proj, and the slice
// [r·F/P, (r+1)·F/P) of the MLP (rows of gate/up_proj, columns of down_proj). Embedding, norms
// and LM head are replicated. Summing the shards' o_proj outputs (and down_proj outputs) gives
// the whole model's: that sum is the all-reduce of tensor-parallel inference and training.
#include <cstdint>

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

}  // namespace attnkit
