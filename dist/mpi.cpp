// Thin wrappers over MPI_COMM_WORLD collectives (the only file that includes <mpi.h>).
#include "attnkit/dist/mpi.hpp"

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <vector>

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

void gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t> sizes, int root) {
  std::vector<int> counts, displs;
  int64_t at = 0;
  for (int64_t n : sizes) {
    check(n >= 0 && at + n <= INT32_MAX, "MPI: gather of ", at + n, " floats exceeds MPI's int counts");
    counts.push_back(int(n));
    displs.push_back(int(at));
    at += n;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  check(rank != root || int64_t(all.size()) == at, "MPI: gather into ", all.size(), " floats, expected ", at);
  ok(MPI_Gatherv(mine.data(), int(mine.size()), MPI_FLOAT, all.data(), counts.data(), displs.data(), MPI_FLOAT,
                 root, MPI_COMM_WORLD),
     "MPI_Gatherv");
}

void barrier() { ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

}  // namespace attnkit::dist
