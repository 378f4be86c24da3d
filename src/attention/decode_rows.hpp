#pragma once
// Where the decode kernels read one KV head's stored rows (address, stride, int8 scales) and how
// they prefetch the rows they will read next. Internal header.
#include <cstddef>
#include <cstdint>

#include "core/prefetch.hpp"

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

// Requests `bytes` of the row that lies rows.pf bytes after `row`, if it is inside the run (always
// inlined, as core/prefetch.hpp explains).
[[gnu::always_inline]] inline void prefetch_ahead(const Rows& rows, const std::byte* row, int64_t bytes) {
  const std::byte* p = row + rows.pf;
  if (rows.pf != 0 && p < rows.pf_end) prefetch_range(p, bytes);
}

}  // namespace attnkit::decode
