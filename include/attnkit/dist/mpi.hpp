#pragma once
// The MPI calls attnkit's distributed tools need (Open MPI from Debian), behind plain functions so
// nothing outside dist/ includes <mpi.h>. Only the CLI links this module: the core library and
// the Python module never call MPI_Init.
#include <cstdint>
#include <span>

namespace attnkit::dist {

// MPI_COMM_WORLD for the lifetime of this object: MPI_Init on construction (unless MPI is already
// initialised), MPI_Finalize on destruction if this object initialised it.
class MpiWorld {
 public:
  MpiWorld();
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // For an error on this rank while other ranks may be waiting in a collective: prints
  // "attnkit: error: rank R of P: <what>" to stderr and ends every rank with MPI_Abort(code), so
  // the job fails fast instead of hanging. With one process it returns (the caller rethrows).
  void abort_all_if_parallel(const char* what, int code = 2) const;

 private:
  int rank_ = 0, size_ = 1;
  bool owns_ = false;
};

// x ← Σ over ranks of x, in place (float32), on every rank.
void all_reduce_sum(std::span<float> x);
// Σ over ranks of x (float64), on every rank.
double all_reduce_sum(double x);
// Largest x over ranks (int64), on every rank.
int64_t all_reduce_max(int64_t x);
// Rank root's value on every rank.
int32_t broadcast(int32_t value, int root = 0);
// Rank root's floats copied into x on every rank (x has the same size everywhere).
void broadcast(std::span<float> x, int root = 0);
// Every rank's `mine` (same size on all ranks), in rank order, into `all` on rank root only.
void gather(std::span<const int64_t> mine, std::span<int64_t> all, int root = 0);
// Every rank's `mine` (sizes may differ), concatenated in rank order into `all` on rank root
// only (all.size() = Σ sizes there; ignored elsewhere). Every rank passes all ranks' sizes.
void gather(std::span<const float> mine, std::span<float> all, std::span<const int64_t> sizes, int root = 0);
// Waits for every rank.
void barrier();

}  // namespace attnkit::dist
