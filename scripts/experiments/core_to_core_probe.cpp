// How far apart are two CPUs? Two threads, pinned to CPUs A and B, pass one cache line back and
// forth (each waits for the other's store, then stores); prints the round trip in ns. Two cores
// sharing a last-level cache answer in roughly 50-150 ns; cores in different cache domains (other
// chiplet or socket) in several hundred. When it is high, a loop whose threads each touch data
// another thread wrote last pays that latency per cache line, which is why parallel_for keeps
// each thread on its own span of the indices (docs/performance.md, Threads and scheduling).
//
// Build and run:
//   g++ -O2 -pthread scripts/experiments/core_to_core_probe.cpp -o /tmp/c2c && /tmp/c2c 0 1
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

alignas(64) std::atomic<long> line{0};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int a = argc > 1 ? std::atoi(argv[1]) : 0, b = argc > 2 ? std::atoi(argv[2]) : 1;
  constexpr long kTrips = 200000;
  bool pinned_b = true;
  std::thread other([&] {
    pinned_b = pin(b);
    for (long i = 0; i < kTrips; ++i) {
      while (line.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      line.store(2 * i + 2, std::memory_order_release);
    }
  });
  if (!pin(a)) std::fprintf(stderr, "cannot pin to CPU %d\n", a);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < kTrips; ++i) {
    line.store(2 * i + 1, std::memory_order_release);
    while (line.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  other.join();
  if (!pinned_b) std::fprintf(stderr, "cannot pin to CPU %d\n", b);
  std::printf("CPUs %d and %d: round trip %.0f ns\n", a, b,
              std::chrono::duration<double, std::nano>(t1 - t0).count() / double(kTrips));
  return 0;
}
