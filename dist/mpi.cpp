// Thin wrappers over MPI_COMM_WORLD collectives (the only file that includes <mpi.h>).
#include "attnkit/dist/mpi.hpp"

#include <mpi.h>

#include <cstdio>

#include "attnkit/core/error.hpp"

namespace attnkit::dist {
namespace {

void ok(int code, const char* what) { check(code == MPI_SUCCESS, "MPI: ", what, " failed (code ", code, ")"); }

}  // namespace

MpiWorld::MpiWorld() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;  // only the main thread calls MPI (OpenMP threads never do)
    ok(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    owns_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiWorld::~MpiWorld() {
  if (owns_) MPI_Finalize();
}

void MpiWorld::abort_all_if_parallel(const char* what, int code) const {
  if (size_ <= 1) return;
  std::fprintf(stderr, "attnkit: error: rank %d of %d: %s\n", rank_, size_, what);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
}

void all_reduce_sum(std::span<float> x) {
  ok(MPI_Allreduce(MPI_IN_PLACE, x.data(), int(x.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
}

double all_reduce_sum(double x) {
  ok(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  return x;
}

int64_t all_reduce_max(int64_t x) {
  ok(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return x;
}

int32_t broadcast(int32_t value, int root) {
  ok(MPI_Bcast(&value, 1, MPI_INT32_T, root, MPI_COMM_WORLD), "MPI_Bcast");
  return value;
}

void broadcast(std::span<float> x, int root) {
  ok(MPI_Bcast(x.data(), int(x.size()), MPI_FLOAT, root, MPI_COMM_WORLD), "MPI_Bcast");
}

void gather(std::span<const int64_t> mine, std::span<int64_t> all, int root) {
  ok(MPI_Gather(mine.data(), int(mine.size()), MPI_INT64_T, all.data(), int(mine.size()), MPI_INT64_T, root,
                MPI_COMM_WORLD),
     "MPI_Gather");
}

void barrier() { ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

}  // namespace attnkit::dist
