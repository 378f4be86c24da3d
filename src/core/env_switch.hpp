#pragma once
// A process-wide on/off setting decided on first use, for switches with a setter and an
// environment override (packed GEMM, decode page order).
#include <atomic>
#include <cstdlib>
#include <string_view>

namespace attnkit {

// The switch's value: flag holds -1 until decided, then 0/1 (the setter stores 0/1). Decided from
// the environment variable `name` when it is set ("0" = off, anything else on), else fallback().
inline bool env_switch(std::atomic<int>& flag, const char* name, bool (*fallback)()) {
  int e = flag.load();
  if (e < 0) {
    const char* env = std::getenv(name);
    const bool on = env ? std::string_view(env) != "0" : fallback();
    int unset = -1;
    flag.compare_exchange_strong(unset, on ? 1 : 0);
    e = flag.load();
  }
  return e == 1;
}

}  // namespace attnkit
