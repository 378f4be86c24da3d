#pragma once
// Where the decode kernels read one KV head's stored rows (address, stride, int8 scales) and how
// they prefetch the rows they will read next. Internal header.
#include <cstddef>
#include <cstdint>

namespace attnkit::decode {

// Rows of one KV head inside a stage: token t's row starts at base + t·stride bytes; int8 rows
// carry scale[t·scale_stride].
struct Rows {
  const std::byte* base;
  int64_t stride;
  const float* scale;
  int64_t scale_stride;
  float scale_at(int64_t t) const { return scale ? scale[t * scale_stride] : 1.0f; }
  int64_t pf = 0;                    // prefetch distance in bytes (0: none)
  const std::byte* pf_end = nullptr; // rows at or past this address are not prefetched
};

// Pulls [p, p + bytes) toward the core (into L2) in address order. Both prefetch helpers are
// always inlined: GCC 12 sees an out-of-line helper as free of side effects (it only reads) and
// deletes the calls to it, which removed half the prefetches of the AVX2 score kernels.
[[gnu::always_inline]] inline void prefetch_range(const std::byte* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 2);
}

// Requests `bytes` of the row that lies rows.pf bytes after `row`, if it is inside the run.
[[gnu::always_inline]] inline void prefetch_ahead(const Rows& rows, const std::byte* row, int64_t bytes) {
  const std::byte* p = row + rows.pf;
  if (rows.pf != 0 && p < rows.pf_end) prefetch_range(p, bytes);
}

}  // namespace attnkit::decode
