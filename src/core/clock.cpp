// now_seconds(): std::chrono::steady_clock in seconds; process_cpu_seconds():
// CLOCK_PROCESS_CPUTIME_ID in seconds.
#include "attnkit/core/clock.hpp"

#include <time.h>

#include <chrono>

namespace attnkit {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double bench_seconds(bool cpu_time) { return cpu_time ? process_cpu_seconds() : now_seconds(); }

}  // namespace attnkit
