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

// Span boundaries 0 = s_0 <= ... <= s_threads = n of equal counts (within one).
std::vector<int64_t> equal_spans(int64_t n, int threads) {
  std::vector<int64_t> bounds(size_t(threads) + 1);
  for (int t = 0; t <= threads; ++t) bounds[size_t(t)] = n * t / threads;
  return bounds;
}

// Span boundaries for costs: index i goes to the span in which the middle of its cost falls, the
// total cut in `threads` equal parts (equal counts when every cost is 0; negative costs count 0).
std::vector<int64_t> cost_spans(const std::vector<double>& costs, int threads) {
  threads = std::max(threads, 1);
  const int64_t n = int64_t(costs.size());
  std::vector<int64_t> bounds(size_t(threads) + 1, n);
  bounds[0] = 0;
  double total = 0;
  for (const double c : costs) total += std::max(c, 0.0);
  double before = 0;
  int span = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double c = std::max(costs[size_t(i)], 0.0);
    const double mid = total > 0 ? (before + c / 2) / total : (double(i) + 0.5) / double(n);
    const int s = std::min(threads - 1, int(mid * threads));
    while (span < s) bounds[size_t(++span)] = i;
    before += c;
  }
  return bounds;
}

// Calls body(i) for every i in [0, n) on up to num_threads() threads: thread t claims the indices
// of span t of spans_for(threads) from its front, then takes indices one at a time from the back
// of whichever span has most left (so spans a smaller team leaves unowned are taken over too).
// Inside a parallel region that cannot nest, the indices run in order on the calling thread.
// Errors thrown by body are rethrown here (the first one).
void run_spans(int64_t n, const std::function<std::vector<int64_t>(int)>& spans_for,
               const std::function<void(int64_t)>& body) {
  if (n <= 0) return;
  const int threads = int(std::min<int64_t>(num_threads(), n));
  if (threads <= 1 || omp_get_active_level() >= omp_get_max_active_levels()) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::exception_ptr error;
  std::once_flag once;
  auto run = [&](int64_t i) {
    try {
      body(i);
    } catch (...) {
      std::call_once(once, [&] { error = std::current_exception(); });
    }
  };
  if (n >= (int64_t(1) << 32)) {  // beyond the packed 32-bit span ends: OpenMP's static split
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) run(i);
    if (error) std::rethrow_exception(error);
    return;
  }
  // Each span's unclaimed indices [front, back), packed in one word (front << 32 | back) so that
  // its owner (from the front) and others (from the back) claim with one compare-exchange.
  struct alignas(64) Span {
    std::atomic<uint64_t> ends{0};
  };
  std::vector<Span> spans(static_cast<size_t>(threads));
  const std::vector<int64_t> b = spans_for(threads);
  for (int t = 0; t < threads; ++t)
    spans[size_t(t)].ends.store(uint64_t(b[size_t(t)]) << 32 | uint64_t(b[size_t(t) + 1]),
                                std::memory_order_relaxed);
  auto claim = [&](int t, bool from_front) -> int64_t {
    std::atomic<uint64_t>& ends = spans[size_t(t)].ends;
    uint64_t e = ends.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t front = e >> 32, back = e & 0xffffffffu;
      if (front >= back) return -1;
      const uint64_t next = from_front ? (front + 1) << 32 | back : front << 32 | (back - 1);
      if (ends.compare_exchange_weak(e, next, std::memory_order_relaxed))
        return int64_t(from_front ? front : back - 1);
    }
  };
#pragma omp parallel num_threads(threads)
  {
    for (int64_t i; (i = claim(omp_get_thread_num(), true)) >= 0;) run(i);
    for (;;) {
      int victim = -1;
      uint64_t most = 0;
      for (int t = 0; t < threads; ++t) {
        const uint64_t e = spans[size_t(t)].ends.load(std::memory_order_relaxed);
        const uint64_t front = e >> 32, back = e & 0xffffffffu;
        if (back > front && back - front > most) most = back - front, victim = t;
      }
      if (victim < 0) break;
      const int64_t i = claim(victim, false);
      if (i >= 0) run(i);
    }
  }
  if (error) std::rethrow_exception(error);
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
  run_spans(n, [n](int threads) { return equal_spans(n, threads); }, body);
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
  const int64_t groups = int64_t(bounds.size()) - 1;
  std::vector<double> group_cost(static_cast<size_t>(std::max<int64_t>(groups, 0)), 0.0);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = bounds[size_t(g)]; i < bounds[size_t(g) + 1]; ++i) group_cost[size_t(g)] += cost(i);
  run_spans(groups, [&](int threads) { return cost_spans(group_cost, threads); }, [&](int64_t g) {
    for (int64_t i = bounds[size_t(g)]; i < bounds[size_t(g) + 1]; ++i) body(i);
  });
}

std::vector<int64_t> span_bounds(int64_t n, const std::function<double(int64_t)>& cost, int threads) {
  std::vector<double> costs(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) costs[size_t(i)] = cost(i);
  return cost_spans(costs, threads);
}

void parallel_for_spans(int64_t n, const std::function<double(int64_t)>& cost,
                        const std::function<void(int64_t)>& body) {
  run_spans(n, [&](int threads) { return span_bounds(n, cost, threads); }, body);
}

int openmp_threads() { return omp_get_max_threads(); }

void set_openmp_threads(int n) { omp_set_num_threads(n > 0 ? n : 1); }

}  // namespace attnkit
