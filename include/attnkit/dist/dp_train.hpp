#pragma once
// Data-parallel training over MPI: rank r of P computes windows [r·B/P, (r+1)·B/P) of every
// step's batch, the gradients and the loss are averaged over the ranks (an all-reduce), so every
// rank applies the whole batch's update and the replicas stay equal; rank 0 writes.
// Launch: mpirun -np P attnkit train gpt --dp ...
#include <span>

#include "attnkit/dist/mpi.hpp"
#include "attnkit/train/gpt_trainer.hpp"

namespace attnkit::dist {

// Sets o.dp_rank, o.dp_size and o.dp_average for `world`.
void configure_data_parallel(const MpiWorld& world, TrainOptions& o);
// Collective: throws attnkit::Error unless every rank holds the same parameters (a sum check).
void check_replicas_in_sync(const MpiWorld& world, std::span<const float> params);

}  // namespace attnkit::dist
