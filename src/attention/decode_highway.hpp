#pragma once
// What the Highway decode kernels (decode_scores.cpp, decode_values.cpp) share: the loaders of
// stored K/V rows, the token width of a score register block on the compiled target, and the
// choice of a kernel instantiation by stored dtype. Internal header for Highway translation units.
#include "attnkit/core/dtype.hpp"
#include "hwy/highway.h"
#include "kv/kv_loaders.hpp"

namespace attnkit::decode {
namespace hn = hwy::HWY_NAMESPACE;

using kv_loaders::DF;
using kv_loaders::LoadBF16;
using kv_loaders::LoadF16;
using kv_loaders::LoadF32;
using kv_loaders::LoadI8;
using kv_loaders::VF;

// Token columns of a score register block of 4 query rows: AVX-512 has 32 vector registers
// (4 × 4 accumulators), AVX2 16 (4 × 2).
#if HWY_TARGET <= HWY_AVX3
inline constexpr int kBlockCols = 4;
#else
inline constexpr int kBlockCols = 2;
#endif

// pick(loader) for rows stored as `stored` (f16, bf16, int8; anything else as f32): `pick` maps a
// loader value (LoadF16{}, ...) to the kernel instantiated for it.
template <class Pick>
auto for_stored(DType stored, Pick pick) {
  switch (stored) {
    case DType::f16: return pick(LoadF16{});
    case DType::bf16: return pick(LoadBF16{});
    case DType::i8: return pick(LoadI8{});
    default: return pick(LoadF32{});
  }
}

}  // namespace attnkit::decode

#define HWY_UNROLL_ALL _Pragma("GCC unroll 16")
