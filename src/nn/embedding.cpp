// Embedding fast path: row copies in parallel over tokens; the backward scatters d_y rows into
// d_table with threads splitting the channels, so each d_table entry receives its tokens' updates
// in token order on one thread (deterministic, no atomics). PyTorch: F.embedding(ids, table).
#include "attnkit/nn/embedding.hpp"

#include <algorithm>
#include <cstdint>

#include "attnkit/core/parallel.hpp"

#include "nn_common.hpp"

namespace attnkit {
namespace nn {

void check_ids(const char* fn, const char* name, std::span<const int32_t> ids, int64_t v) {
  for (size_t t = 0; t < ids.size(); ++t)
    check(ids[t] >= 0 && ids[t] < v, fn, ": ", name, "[", t, "] = ", ids[t],
          " is out of range [0, ", v, ")");
}

void check_embedding(const char* fn, const char* out_name, ConstView2 out,
                     std::span<const int32_t> ids, ConstView2 table, const char* table_name) {
  const int64_t t = int64_t(ids.size()), v = table.shape[0], c = table.shape[1];
  check_matrix(table, fn, table_name, "[V, C]", v, c);
  check_matrix(out, fn, out_name, "[T, C]", t, c);
  check_ids(fn, "ids", ids, v);
}

}  // namespace nn

void embedding_forward(View2 y, std::span<const int32_t> ids, ConstView2 table) {
  nn::check_embedding("embedding_forward", "y", y, ids, table, "table");
  const int64_t c = table.shape[1];
  nn::parallel_rows(int64_t(ids.size()), c, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) std::copy_n(table.ptr(ids[size_t(t)]), c, y.ptr(t));
  });
}

void embedding_backward(View2 d_table, std::span<const int32_t> ids, ConstView2 d_y) {
  nn::check_embedding("embedding_backward", "d_y", d_y, ids, d_table, "d_table");
  // Column blocks of 64 floats, the first cut short so that the others start on a cache line
  // when all rows share the table's alignment: the threads walk the same tokens, so they often
  // add into the same row at once, and must not share a line there. Each element still sums its
  // tokens in order, so the result does not depend on the blocks.
  constexpr int64_t kBlock = 64, kLineFloats = 16;
  const int64_t cols = d_table.shape[1];
  const auto addr = reinterpret_cast<uintptr_t>(d_table.data);
  const int64_t lead =  // floats before the first cache-line boundary (< kLineFloats)
      d_table.stride[0] % kLineFloats == 0 ? int64_t((64 - addr % 64) % 64 / sizeof(float)) : 0;
  const int64_t first = std::min(cols, lead == 0 ? kBlock : lead);
  const int64_t blocks = cols <= first ? 1 : 1 + (cols - first + kBlock - 1) / kBlock;
  parallel_for(blocks, [&](int64_t blk) {
    const int64_t c0 = blk == 0 ? 0 : first + (blk - 1) * kBlock;
    const int64_t c1 = blk == 0 ? first : std::min(cols, c0 + kBlock);
    for (size_t t = 0; t < ids.size(); ++t) {
      const float* g = d_y.ptr(int64_t(t));
      float* dst = d_table.ptr(ids[t]);
      for (int64_t c = c0; c < c1; ++c) dst[c] += g[c];
    }
  });
}

}  // namespace attnkit
