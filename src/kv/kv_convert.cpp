// Cache rows to float32 through the shared loaders (kv_loaders.hpp): f16 through F16C, bf16 by a
// 16-bit shift, int8 widened and scaled; unaligned sources are fine, tails are scalar.
#include <cstring>

#include "attnkit/core/error.hpp"
#include "attnkit/kv/kv_cache.hpp"
#include "kv_loaders.hpp"

namespace attnkit {

namespace {

void load_row(const std::byte* src, DType dtype, float scale, int64_t n, float* dst) {
  using namespace kv_loaders;
  switch (dtype) {
    case DType::f32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::f16: return kv_loaders::load_row<LoadF16>(src, 1.0f, n, dst);
    case DType::bf16: return kv_loaders::load_row<LoadBF16>(src, 1.0f, n, dst);
    case DType::i8: return kv_loaders::load_row<LoadI8>(src, scale, n, dst);
    default: fail("KVCache: unsupported storage dtype ", dtype_name(dtype));
  }
}

}  // namespace

void kv_load_row(const std::byte* src, DType dtype, float scale, int64_t n, float* dst) {
  load_row(src, dtype, scale, n, dst);
}

void kv_load_rows(const std::byte* src, DType dtype, const float* scales, int64_t rows, int64_t n,
                  float* dst, int64_t dst_stride) {
  const int64_t bytes = n * int64_t(dtype_size(dtype));
  for (int64_t r = 0; r < rows; ++r)
    load_row(src + r * bytes, dtype, scales ? scales[r] : 1.0f, n, dst + r * dst_stride);
}

}  // namespace attnkit
