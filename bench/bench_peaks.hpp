#pragma once
// The machine peaks the Google Benchmark counters divide by, measured in this process with the
// threads the benchmarks use (tools/roofline.hpp).
#include <algorithm>

#include "attnkit/core/parallel.hpp"
#include "attnkit/tools/roofline.hpp"

namespace attnkit::bench {

// OpenBLAS sgemm rate in GFLOP/s, measured on first use and kept.
inline double sgemm_rate() {
  static const double rate = measure_sgemm_gflops(num_threads());
  return rate;
}

// The best FMA peak in GFLOP/s measured so far in this process; `again` measures once more first.
inline double fma_peak(bool again) {
  static double peak = 0;
  if (again || peak == 0) peak = std::max(peak, measure_fma_gflops(num_threads()));
  return peak;
}

}  // namespace attnkit::bench
