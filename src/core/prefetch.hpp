#pragma once
// Software prefetch of a byte range, for kernels whose reads the hardware prefetchers do not
// follow (decode's rows of many KV heads, the Winograd transforms' planes, read and written).
// Internal header.
#include <cstddef>
#include <cstdint>

namespace attnkit {

// Pulls [p, p + bytes) toward the core (into L2) in address order, one request per 64-byte line
// from p. Always inlined, as must be every helper that calls it: GCC 12 sees an out-of-line helper
// as free of side effects (it only reads) and deletes the calls to it, which once removed half
// the prefetches of the AVX2 decode score kernels.
[[gnu::always_inline]] inline void prefetch_range(const std::byte* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 2);
}

// As prefetch_range, with the lines requested for writing (ownership, into L1), for stores that
// follow. Always inlined (see prefetch_range).
[[gnu::always_inline]] inline void prefetch_range_for_write(const std::byte* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 1, 3);
}

}  // namespace attnkit
