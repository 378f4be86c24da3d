// Whether decode reads a block one 4 KiB page phase at a time (decode.cpp, run_item): a
// per-machine choice of reading order. Measured (bench/decode_ab.py, GQA, f16 cache, S 16384,
// 2 threads): faster on an Intel Ice Lake (3.20 -> 2.99 ms), slower on AMD Zen 5 (1.71 -> 2.00 ms
// AVX-512, 2.07 -> 2.70 ms AVX2), so the default is on for Intel CPUs only.
#include <atomic>

#include "attnkit/attention/decode.hpp"
#include "core/env_switch.hpp"

namespace attnkit {
namespace {

std::atomic<int> g_page_order{-1};  // -1 = not decided yet, else 0/1

bool on_intel() {
  __builtin_cpu_init();
  return __builtin_cpu_is("intel");
}

}  // namespace

bool decode_page_order() { return env_switch(g_page_order, "ATTNKIT_DECODE_PAGE_ORDER", on_intel); }

void set_decode_page_order(bool on) { g_page_order.store(on ? 1 : 0); }

}  // namespace attnkit
