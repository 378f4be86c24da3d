#pragma once
// Loaders for KV-cache storage: one vector of float32 from stored f32/f16/bf16/int8 elements,
// converted in registers (Highway, static target), plus a scalar fallback for tails. Shared by
// the decode kernel (which converts inside its FMA loops) and kv_load_rows. Internal header.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "attnkit/core/dtype.hpp"
#include "hwy/highway.h"

namespace attnkit::kv_loaders {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

struct LoadF32 {
  static constexpr int64_t kBytes = 4;
  static VF load(const std::byte* p) { return hn::LoadU(DF(), reinterpret_cast<const float*>(p)); }
  static float one(const std::byte* p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
};
struct LoadF16 {
  static constexpr int64_t kBytes = 2;
  static VF load(const std::byte* p) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  }
  static float one(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
  }
};
struct LoadBF16 {
  static constexpr int64_t kBytes = 2;
  static VF load(const std::byte* p) {
    const hn::Rebind<uint16_t, DF> d16;
    const hn::RebindToUnsigned<DF> d32;
    const auto wide = hn::PromoteTo(d32, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p)));
    return hn::BitCast(DF(), hn::ShiftLeft<16>(wide));
  }
  static float one(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_to_f32(h);
  }
};
struct LoadI8 {  // the per-token-per-head scale is applied by the caller
  static constexpr int64_t kBytes = 1;
  static VF load(const std::byte* p) {
    const hn::Rebind<int8_t, DF> d8;
    return hn::ConvertTo(DF(), hn::PromoteTo(hn::RebindToSigned<DF>(), hn::LoadU(d8, reinterpret_cast<const int8_t*>(p))));
  }
  static float one(const std::byte* p) { return float(int8_t(*p)); }
};

// dst[i] = element i of a stored row of n elements (times `scale`, meaningful for int8).
template <class L>
HWY_INLINE void load_row(const std::byte* src, float scale, int64_t n, float* dst) {
  const int64_t lanes = int64_t(hn::Lanes(DF()));
  const auto vs = hn::Set(DF(), scale);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(L::load(src + i * L::kBytes), vs), DF(), dst + i);
  for (; i < n; ++i) dst[i] = L::one(src + i * L::kBytes) * scale;
}

}  // namespace attnkit::kv_loaders
