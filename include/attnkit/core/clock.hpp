#pragma once
// Clocks for timing runs (trainers, benchmarks, the CLI).

namespace attnkit {

// Seconds from a monotonic clock (steady_clock); only differences are meaningful.
double now_seconds();

// Seconds of CPU time used by the process, all threads (CLOCK_PROCESS_CPUTIME_ID); only
// differences are meaningful.
double process_cpu_seconds();

// A benchmark's clock in seconds: process_cpu_seconds() when cpu_time, else now_seconds().
double bench_seconds(bool cpu_time);

}  // namespace attnkit
