#pragma once
// Tensor-parallel generation over MPI (Megatron-LM's layout, see models/gpt_shard.hpp): rank r of
// P holds shard r of the model (H/P query heads, the KV heads they read, F/P of the MLP) and its
// part of the KV cache; the partial outputs of o_proj and of down_proj are summed with an
// all-reduce, so every rank holds the whole residual stream and computes the full logits. Rank 0
// samples and broadcasts each token. Launch: mpirun -np P attnkit generate --tp P ...
#include <cstdint>
#include <span>

#include "attnkit/models/gpt_generate.hpp"
#include "attnkit/models/gpt_shard.hpp"

namespace attnkit::dist {

class TpGenerator {
 public:
  // Every rank passes the whole model and the same options; this rank keeps shard `rank` of
  // `ranks` (MPI_COMM_WORLD's size). options.all_reduce is set here.
  TpGenerator(const GptModel& full, const GenerateOptions& options, int rank, int ranks);
  // Feeds one token on every rank (collective); returns the logits [V] for the next token.
  std::span<const float> feed(int32_t token) { return gen_.feed(token); }
  // Feeds a prompt in batched steps (collective); returns the logits [V] after its last token.
  std::span<const float> feed_prompt(std::span<const int32_t> tokens) { return gen_.feed_prompt(tokens); }
  // Rank 0's sample from the logits, on every rank (collective).
  int32_t sample(std::span<const float> logits);
  // This rank's shard: its KV cache (only its KV heads), head ranges and model.
  const KVCache& cache() const { return gen_.cache(); }
  const GptShardRange& range() const { return range_; }
  const GptModel& shard() const { return shard_; }

 private:
  GptShardRange range_;
  GptModel shard_;
  GptGenerator gen_;
};

}  // namespace attnkit::dist
