// Tensor-parallel generation: a GptGenerator on this rank's shard with an MPI all-reduce hook.
#include "attnkit/dist/tp_generate.hpp"

#include "attnkit/dist/mpi.hpp"

namespace attnkit::dist {
namespace {

GenerateOptions with_all_reduce(GenerateOptions o) {
  o.all_reduce = [](std::span<float> x) { all_reduce_sum(x); };
  return o;
}

}  // namespace

TpGenerator::TpGenerator(const GptModel& full, const GenerateOptions& options, int rank, int ranks)
    : range_(gpt_shard_range(full.config(), rank, ranks)),
      shard_(gpt_tensor_parallel_shard(full, rank, ranks)),
      gen_(shard_, with_all_reduce(options)) {}

int32_t TpGenerator::sample(std::span<const float> logits) {
  // Every rank draws (keeping the generators' RNG states equal); rank 0's draw is used.
  return broadcast(gen_.sample(logits), 0);
}

}  // namespace attnkit::dist
