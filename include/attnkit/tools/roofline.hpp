#pragma once
// This machine's roofline, measured in the calling process: FMA throughput, memory read
// bandwidth and OpenBLAS sgemm rate, so benchmarks can report fractions of peaks measured in the
// same run (these machines are shared and noisy: never quote a stored figure).
#include <algorithm>
#include <cstdint>

#include "attnkit/core/clock.hpp"  // now_seconds, which the benchmarks time with

namespace attnkit {

// The shortest wall time of `repeats` calls of f, in seconds (the benchmarks' best-of timing).
template <class F>
double best_of(int repeats, F&& f) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now_seconds();
    f();
    best = std::min(best, now_seconds() - t0);
  }
  return best;
}

// Peak single-precision FMA rate in GFLOP/s (2 flops per lane per FMA) with `threads` threads,
// from independent register-resident FMA chains; best of a few repeats.
double measure_fma_gflops(int threads);
// Sustained memory read bandwidth in GB/s (1e9 bytes/s) with `threads` threads over `bytes`
// (0: 512 MiB or twice the last-level cache, whichever is larger), each thread reading `streams`
// forward streams in lockstep; best of a few repeats. The buffer is on transparent huge pages
// where the kernel gives them, as the KV cache's storage is.
double measure_read_gbps(int threads, int64_t bytes = 0, int streams = 4);
// OpenBLAS sgemm rate in GFLOP/s (2·n³ flops) for square n×n matrices with `threads` threads;
// best of a few repeats.
double measure_sgemm_gflops(int threads, int64_t n = 2048);

}  // namespace attnkit
