// OpenMP behind parallel_for. Exceptions thrown by a body are captured and rethrown on the caller.
// Every parallel region states its thread count, so OpenMP's global default (which other libraries
// in the process, such as PyTorch, change with omp_set_num_threads) never decides attnkit's.
#include "attnkit/core/parallel.hpp"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <vector>

namespace attnkit {
namespace {
std::atomic<int> g_threads{0};  // 0 = the default below

struct DefaultThreads {
  int count = 1;
  const char* source = "CPU affinity";
};

// OMP_NUM_THREADS (its first value) when the user set it, else the CPUs this process may run on.
// Read once, from the environment and the affinity mask, never from OpenMP's mutable state.
const DefaultThreads& default_threads() {
  static const DefaultThreads d = [] {
    DefaultThreads r;
    if (const char* env = std::getenv("OMP_NUM_THREADS")) {
      char* end = nullptr;
      const long n = std::strtol(env, &end, 10);
      if (end != env && n > 0 && n <= kMaxThreads) {
        r.count = int(n);
        r.source = "OMP_NUM_THREADS";
        return r;
      }
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) r.count = CPU_COUNT(&set);
    if (r.count < 1) r.count = 1;
    if (r.count > kMaxThreads) r.count = kMaxThreads;
    return r;
  }();
  return d;
}
}  // namespace

int num_threads() {
  const int n = g_threads.load();
  return n > 0 ? n : default_threads().count;
}

const char* num_threads_source() {
  return g_threads.load() > 0 ? "set_num_threads" : default_threads().source;
}

void set_num_threads(int n) { g_threads.store(n > 0 ? (n < kMaxThreads ? n : kMaxThreads) : 0); }

int num_threads_override() { return g_threads.load(); }

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

std::vector<int64_t> group_bounds(int64_t n, const std::function<double(int64_t)>& cost,
                                  double min_cost, int threads) {
  std::vector<int64_t> bounds{0};
  if (n <= 0) return bounds;
  std::vector<double> costs(static_cast<size_t>(n));
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += costs[size_t(i)] = cost(i);
  // At least 4 groups per thread when the items allow it, so the threads stay balanced.
  const double closes_at = std::min(min_cost, total / (4.0 * std::max(threads, 1)));
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc += costs[size_t(i)];
    if (acc >= closes_at || i + 1 == n) {
      bounds.push_back(i + 1);
      acc = 0;
    }
  }
  return bounds;
}

void parallel_for_grouped(int64_t n, const std::function<double(int64_t)>& cost, double min_cost,
                          const std::function<void(int64_t)>& body) {
  const std::vector<int64_t> bounds = group_bounds(n, cost, min_cost, num_threads());
  parallel_for(int64_t(bounds.size()) - 1, [&](int64_t g) {
    for (int64_t i = bounds[size_t(g)]; i < bounds[size_t(g) + 1]; ++i) body(i);
  });
}

std::vector<int64_t> span_bounds(int64_t n, const std::function<double(int64_t)>& cost, int threads) {
  threads = std::max(threads, 1);
  std::vector<int64_t> bounds(size_t(threads) + 1, std::max<int64_t>(n, 0));
  bounds[0] = 0;
  if (n <= 0) return bounds;
  std::vector<double> costs(static_cast<size_t>(n));
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += costs[size_t(i)] = std::max(cost(i), 0.0);
  // Span of index i: where the middle of its cost falls (its position when all costs are 0).
  double before = 0;
  int span = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double mid = total > 0 ? (before + costs[size_t(i)] / 2) / total : (double(i) + 0.5) / double(n);
    const int s = std::min(threads - 1, int(mid * threads));
    while (span < s) bounds[size_t(++span)] = i;
    before += costs[size_t(i)];
  }
  return bounds;
}

void parallel_for_spans(int64_t n, const std::function<double(int64_t)>& cost,
                        const std::function<void(int64_t)>& body) {
  if (n <= 0) return;
  const int threads = int(std::min<int64_t>(num_threads(), n));
  if (threads <= 1 || n >= (int64_t(1) << 31)) return parallel_for(n, body);
  const std::vector<int64_t> bounds = span_bounds(n, cost, threads);
  // Each span's unclaimed indices [front, back), packed in one word (front << 32 | back) so that
  // its owner (from the front) and thieves (from the back) claim with one compare-exchange.
  struct alignas(64) Span {
    std::atomic<uint64_t> ends;
  };
  std::vector<Span> spans(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t)
    spans[size_t(t)].ends = uint64_t(bounds[size_t(t)]) << 32 | uint64_t(bounds[size_t(t) + 1]);
  // Claims an index of span t from its front or its back; -1 when the span is empty.
  auto claim = [&](int t, bool from_front) -> int64_t {
    std::atomic<uint64_t>& ends = spans[size_t(t)].ends;
    uint64_t e = ends.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t front = e >> 32, back = e & 0xffffffffu;
      if (front >= back) return -1;
      const uint64_t next = from_front ? (front + 1) << 32 | back : front << 32 | (back - 1);
      if (ends.compare_exchange_weak(e, next, std::memory_order_relaxed)) {
        return int64_t(from_front ? front : back - 1);
      }
    }
  };
  std::exception_ptr error;
  std::once_flag once;
  auto run = [&](int64_t i) {
    try {
      body(i);
    } catch (...) {
      std::call_once(once, [&] { error = std::current_exception(); });
    }
  };
#pragma omp parallel num_threads(threads)
  {
    // A region given fewer threads than asked (nested parallelism) leaves some spans unowned:
    // the threads it has take them over from the back.
    const int self = omp_get_thread_num();
    for (int64_t i; (i = claim(self, true)) >= 0;) run(i);
    for (;;) {
      int victim = -1;
      uint64_t most = 0;
      for (int t = 0; t < threads; ++t) {
        const uint64_t e = spans[size_t(t)].ends.load(std::memory_order_relaxed);
        const uint64_t left = (e & 0xffffffffu) > (e >> 32) ? (e & 0xffffffffu) - (e >> 32) : 0;
        if (left > most) most = left, victim = t;
      }
      if (victim < 0) break;
      const int64_t i = claim(victim, false);
      if (i >= 0) run(i);
    }
  }
  if (error) std::rethrow_exception(error);
}

int openmp_threads() { return omp_get_max_threads(); }

void set_openmp_threads(int n) { omp_set_num_threads(n > 0 ? n : 1); }

}  // namespace attnkit
