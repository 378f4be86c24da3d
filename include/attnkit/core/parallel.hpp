#pragma once
// Threading: the only place attnkit talks to OpenMP. parallel_for hands out indices dynamically;
// callers write results to disjoint places so results never depend on the thread count.
#include <cstdint>
#include <functional>

namespace attnkit {

// Number of threads parallel_for uses (default: OpenMP's, i.e. OMP_NUM_THREADS or the cores).
int num_threads();
// Sets the threads parallel_for uses; n <= 0 restores the default.
void set_num_threads(int n);
// Index of the calling thread inside parallel_for, in [0, num_threads()); 0 outside.
int thread_index();
// Calls body(i) for every i in [0, n), spread over the threads with dynamic scheduling.
void parallel_for(int64_t n, const std::function<void(int64_t)>& body);

// Scoped override of the thread count (restores the previous value on destruction).
class ThreadCountScope {
 public:
  explicit ThreadCountScope(int n) : saved_(num_threads()) { set_num_threads(n); }
  ~ThreadCountScope() { set_num_threads(saved_); }
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;

 private:
  int saved_;
};

}  // namespace attnkit
