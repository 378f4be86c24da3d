// OpenMP behind parallel_for. Exceptions thrown by a body are captured and rethrown on the caller.
#include "attnkit/core/parallel.hpp"

#include <omp.h>

#include <atomic>
#include <exception>
#include <mutex>

namespace attnkit {
namespace {
std::atomic<int> g_threads{0};  // 0 = the default below
// OpenMP's default thread count, captured when the library loads: OpenBLAS's OpenMP build
// implements openblas_set_num_threads(n) with omp_set_num_threads(n), so reading
// omp_get_max_threads() later (inside a BlasThreadsScope(1), say) would silently give 1.
const int g_default_threads = omp_get_max_threads();
}  // namespace

int num_threads() {
  const int n = g_threads.load();
  return n > 0 ? n : g_default_threads;
}

void set_num_threads(int n) { g_threads.store(n > 0 ? n : 0); }

int thread_index() { return omp_in_parallel() ? omp_get_thread_num() : 0; }

void parallel_for(int64_t n, const std::function<void(int64_t)>& body) {
  if (n <= 0) return;
  const int threads = int(std::min<int64_t>(num_threads(), n));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::exception_ptr error;
  std::once_flag once;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    try {
      body(i);
    } catch (...) {
      std::call_once(once, [&] { error = std::current_exception(); });
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace attnkit
