// now_seconds(): std::chrono::steady_clock in seconds.
#include "attnkit/core/clock.hpp"

#include <chrono>

namespace attnkit {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace attnkit
