// Decode value update O += P·V against stored V rows, converted in registers (Highway, static
// target). Register blocks of 4 query rows × kVecs vectors of accumulators (AVX-512: 4 × 4, AVX2:
// 4 × 2), or 1 row × 4 vectors for leftover rows; each converted v vector serves every row of its
// block. PyTorch: o += p @ v.
#include <type_traits>

#include "decode_highway.hpp"
#include "decode_kernels.hpp"

namespace attnkit::decode {
namespace {

constexpr int kVecs = kBlockCols;  // vectors per P·V block

// o[r, :] += Σ_t p[r·lp + t]·v_t for r < rows, t < bt (v stored rows, o [rows, d] float32).
// Blocks of 4 rows × kVecs vectors of accumulators, or 1 row × 4 vectors; each converted v
// vector serves every row of the block.
template <class L>
void block_accumulate(const float* p, int64_t lp, int64_t rows, const Rows& v, int64_t bt,
                      int64_t d, float* o) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  auto scalar_tail = [&](int64_t r0, int64_t r1, int64_t e0) {
    if (e0 >= d) return;  // no leftover elements (the common case: not even a loop over rows)
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t t = 0; t < bt; ++t) {
        const float w = p[r * lp + t] * v.scale_at(t);
        const std::byte* vt = v.base + t * v.stride;
        for (int64_t e = e0; e < d; ++e) o[r * d + e] += w * L::one(vt + e * L::kBytes);
      }
  };
  int64_t r = 0;
  const int64_t dk = d - d % (kVecs * lanes);
  for (; r + 4 <= rows; r += 4) {
    for (int64_t e = 0; e < dk; e += kVecs * lanes) {  // 4 rows × kVecs vectors of accumulators
      float* o0 = o + r * d + e;
      VF acc[4][kVecs];
      HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
        HWY_UNROLL_ALL for (int j = 0; j < kVecs; ++j) acc[i][j] = hn::LoadU(df, o0 + i * d + j * lanes);
      for (int64_t t = 0; t < bt; ++t) {
        const std::byte* vt = v.base + t * v.stride + e * L::kBytes;
        if (r == 0) prefetch_ahead(v, vt, kVecs * lanes * L::kBytes);
        VF x[kVecs];
        HWY_UNROLL_ALL for (int j = 0; j < kVecs; ++j) x[j] = L::load(vt + j * lanes * L::kBytes);
        const float* pt = p + r * lp + t;
        HWY_UNROLL_ALL for (int i = 0; i < 4; ++i) {
          const float w = std::is_same_v<L, LoadI8> ? v.scale_at(t) * pt[i * lp] : pt[i * lp];
          const auto pv = hn::Set(df, w);
          HWY_UNROLL_ALL for (int j = 0; j < kVecs; ++j) acc[i][j] = hn::MulAdd(pv, x[j], acc[i][j]);
        }
      }
      HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
        HWY_UNROLL_ALL for (int j = 0; j < kVecs; ++j) hn::StoreU(acc[i][j], df, o0 + i * d + j * lanes);
    }
    scalar_tail(r, r + 4, dk);
  }
  const int64_t d4 = d - d % (4 * lanes);
  for (; r < rows; ++r) {
    float* orow = o + r * d;
    const float* prow = p + r * lp;
    for (int64_t e = 0; e < d4; e += 4 * lanes) {
      auto a0 = hn::LoadU(df, orow + e), a1 = hn::LoadU(df, orow + e + lanes);
      auto a2 = hn::LoadU(df, orow + e + 2 * lanes), a3 = hn::LoadU(df, orow + e + 3 * lanes);
      for (int64_t t = 0; t < bt; ++t) {
        const auto w = hn::Set(df, prow[t] * v.scale_at(t));
        const std::byte* vt = v.base + t * v.stride + e * L::kBytes;
        if (r == 0) prefetch_ahead(v, vt, 4 * lanes * L::kBytes);
        a0 = hn::MulAdd(w, L::load(vt), a0);
        a1 = hn::MulAdd(w, L::load(vt + lanes * L::kBytes), a1);
        a2 = hn::MulAdd(w, L::load(vt + 2 * lanes * L::kBytes), a2);
        a3 = hn::MulAdd(w, L::load(vt + 3 * lanes * L::kBytes), a3);
      }
      hn::StoreU(a0, df, orow + e), hn::StoreU(a1, df, orow + e + lanes);
      hn::StoreU(a2, df, orow + e + 2 * lanes), hn::StoreU(a3, df, orow + e + 3 * lanes);
    }
    scalar_tail(r, r + 1, d4);
  }
}


}  // namespace

ValueKernel value_kernel(DType stored) {
  return for_stored(stored,
                    [](auto loader) -> ValueKernel { return &block_accumulate<decltype(loader)>; });
}

}  // namespace attnkit::decode
