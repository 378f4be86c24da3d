// Cache rows to float32 with Highway: f16 through F16C, bf16 by a 16-bit shift, int8 widened and
// scaled. Unaligned sources are fine (LoadU); tails fall back to scalar conversion.
#include <cstring>

#include "attnkit/core/error.hpp"
#include "attnkit/kv/kv_cache.hpp"
#include "hwy/highway.h"

namespace attnkit {
namespace hn = hwy::HWY_NAMESPACE;

namespace {

HWY_INLINE void load_row(const std::byte* src, DType dtype, float scale, int64_t n, float* dst) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  int64_t i = 0;
  switch (dtype) {
    case DType::f32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::f16: {
      const hn::Rebind<hwy::float16_t, decltype(df)> dh;
      const auto* p = reinterpret_cast<const hwy::float16_t*>(src);
      for (; i + lanes <= n; i += lanes) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, p + i)), df, dst + i);
      for (; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    }
    case DType::bf16: {
      const hn::Rebind<uint16_t, decltype(df)> du16;
      const hn::RebindToUnsigned<decltype(df)> du32;
      const auto* p = reinterpret_cast<const uint16_t*>(src);
      for (; i + lanes <= n; i += lanes) {
        const auto wide = hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p + i)));
        hn::StoreU(hn::BitCast(df, wide), df, dst + i);
      }
      for (; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    }
    case DType::i8: {
      const hn::Rebind<int8_t, decltype(df)> d8;
      const hn::RebindToSigned<decltype(df)> di;
      const auto* p = reinterpret_cast<const int8_t*>(src);
      const auto vs = hn::Set(df, scale);
      for (; i + lanes <= n; i += lanes)
        hn::StoreU(hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p + i))), vs), df, dst + i);
      for (; i < n; ++i) dst[i] = float(int8_t(src[i])) * scale;
      return;
    }
    default:
      fail("KVCache: unsupported storage dtype ", dtype_name(dtype));
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
