#pragma once
// Tensor-parallel training over MPI (Megatron-LM's layout, see models/gpt_shard.hpp): rank r of P
// trains shard r of a GptModel on the whole batch; the model's tensor-parallel sum (an
// all-reduce of [T, C] after o_proj and down_proj in the forward, and of the gradients of the
// column-parallel inputs in the backward) makes the shards compute the whole network's loss on
// every rank. Replicated parameters (embedding, norms, LM head) then get identical gradients on
// every rank; a KV head replicated over P/Hkv ranks (Hkv < P) gets its k/v gradients summed over
// its replicas. The gradient norm for clipping is the whole model's. Checkpoints are gathered to
// rank 0 and written as an ordinary one-process checkpoint (weights + AdamW moments); gathering
// checks that every replica is bitwise equal to its first holder's copy.
// Launch: mpirun -np P attnkit train gpt --tp P ...
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attnkit/models/gpt_shard.hpp"
#include "attnkit/train/adamw.hpp"
#include "attnkit/train/gpt_trainer.hpp"

namespace attnkit::dist {

class TpTraining {
 public:
  // Every rank passes the same whole model; this rank keeps shard `rank` of `ranks`
  // (MPI_COMM_WORLD's size) with its tensor-parallel sum set to an MPI all-reduce.
  TpTraining(const GptModel& full, int rank, int ranks);
  TpTraining(const TpTraining&) = delete;
  TpTraining& operator=(const TpTraining&) = delete;
  // This rank's shard: the model to give to GptTrainer.
  GptModel& shard() { return shard_; }
  // Sets o.tp_rank and o.tp_* hooks (they refer to this object: keep it alive while training).
  void configure(TrainOptions& o);
  // Collective: the whole model's flat buffer (parameter layout, e.g. weights or moments) from
  // every rank's `mine` (this shard's buffer, same layout as shard().parameters()), on rank 0;
  // empty on the other ranks. Throws attnkit::Error on rank 0 if a replicated value differs
  // between ranks (the caller then aborts every rank).
  std::vector<float> gather(std::span<const float> mine) const;
  // Collective: writes the whole model (config.json, model.safetensors) and the whole AdamW
  // state (optimizer.safetensors, from `optimizer` over shard()'s parameters) to dir on rank 0.
  void save(AdamW& optimizer, const std::string& dir) const;
  // Every rank: loads dir's whole-model checkpoint (as written by save or by one process) into
  // shard() and `optimizer`'s moments and step. Throws if its config differs from this run's.
  void load(AdamW& optimizer, const std::string& dir);

 private:
  GptConfig full_config_;
  int rank_, ranks_;
  std::vector<GptShardRun> layout_;
  std::vector<int64_t> shard_sizes_;  // [P] parameters per shard
  GptModel shard_;
};

}  // namespace attnkit::dist
