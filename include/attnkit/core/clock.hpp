#pragma once
// Wall-clock time for timing runs (trainers, benchmarks, the CLI).

namespace attnkit {

// Seconds from a monotonic clock (steady_clock); only differences are meaningful.
double now_seconds();

}  // namespace attnkit
