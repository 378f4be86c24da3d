// Decode value update O += P·V against stored V rows, converted in registers (Highway, static
// target). Register blocks of 4 query rows × kVecs vectors of accumulators (AVX-512: 4 × 4, AVX2:
// 4 × 3), or 1 row × kRowVecs vectors for leftover rows (AVX-512: 4, AVX2: 8); each converted v
// vector serves every row of its block. PyTorch: o += p @ v.
#include <type_traits>

#include "decode_highway.hpp"
#include "decode_kernels.hpp"

namespace attnkit::decode {
namespace {

// Vectors per P·V register block. kVecs, of 4 rows: AVX-512 4 (16 accumulators of 32 registers),
// AVX2 3 (12 accumulators, 3 converted v vectors and the broadcast p of 16 registers). kRowVecs, of
// 1 row (rows left over from the blocks of 4; MHA's only row): AVX-512 4, AVX2 8 (a row's 64
// floats per pass over the tokens: 128 contiguous bytes of an f16 row per token instead of 64).
#if HWY_TARGET <= HWY_AVX3
constexpr int kVecs = 4, kRowVecs = 4;
#else
constexpr int kVecs = 3, kRowVecs = 8;
#endif

// o[i, e + j·lanes …] += Σ_t p[i·lp + t]·v_t[e + j·lanes …] for 4 rows i and NV vectors j at
// element e (v stored rows, o rows d floats apart): 4 × NV accumulators; each converted v vector
// serves all 4 rows. Prefetches v.pf bytes ahead when `prefetch`.
template <class L, int NV>
HWY_INLINE void rows4_block(const float* p, int64_t lp, const Rows& v, int64_t bt, int64_t d,
                            int64_t e, bool prefetch, float* o) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  VF acc[4][NV];
  HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
    HWY_UNROLL_ALL for (int j = 0; j < NV; ++j) acc[i][j] = hn::LoadU(df, o + i * d + e + j * lanes);
  for (int64_t t = 0; t < bt; ++t) {
    const std::byte* vt = v.base + t * v.stride + e * L::kBytes;
    if (prefetch) prefetch_ahead(v, vt, NV * lanes * L::kBytes);
    VF x[NV];
    HWY_UNROLL_ALL for (int j = 0; j < NV; ++j) x[j] = L::load(vt + j * lanes * L::kBytes);
    HWY_UNROLL_ALL for (int i = 0; i < 4; ++i) {
      const float w = std::is_same_v<L, LoadI8> ? v.scale_at(t) * p[i * lp + t] : p[i * lp + t];
      const auto pv = hn::Set(df, w);
      HWY_UNROLL_ALL for (int j = 0; j < NV; ++j) acc[i][j] = hn::MulAdd(pv, x[j], acc[i][j]);
    }
  }
  HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
    HWY_UNROLL_ALL for (int j = 0; j < NV; ++j) hn::StoreU(acc[i][j], df, o + i * d + e + j * lanes);
}

// o[e + j·lanes …] += Σ_t p[t]·scale_t·v_t[e + j·lanes …] for one row and NV vectors j at element e
// (v stored rows): NV accumulators. Prefetches v.pf bytes ahead when `prefetch`.
template <class L, int NV>
HWY_INLINE void row1_block(const float* p, const Rows& v, int64_t bt, int64_t e, bool prefetch,
                           float* o) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  VF acc[NV];
  HWY_UNROLL_ALL for (int j = 0; j < NV; ++j) acc[j] = hn::LoadU(df, o + e + j * lanes);
  for (int64_t t = 0; t < bt; ++t) {
    const auto w = hn::Set(df, p[t] * v.scale_at(t));
    const std::byte* vt = v.base + t * v.stride + e * L::kBytes;
    if (prefetch) prefetch_ahead(v, vt, NV * lanes * L::kBytes);
    HWY_UNROLL_ALL for (int j = 0; j < NV; ++j)
      acc[j] = hn::MulAdd(w, L::load(vt + j * lanes * L::kBytes), acc[j]);
  }
  HWY_UNROLL_ALL for (int j = 0; j < NV; ++j) hn::StoreU(acc[j], df, o + e + j * lanes);
}

// o[r, :] += Σ_t p[r·lp + t]·v_t for r < rows, t < bt (v stored rows, o [rows, d] float32).
// Blocks of 4 rows × kVecs vectors of accumulators or 1 row × kRowVecs vectors, the vectors left
// at a row's end in blocks of 4, 2 and 1; each converted v vector serves every row of the block.
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
  const int64_t dv = d - d % lanes;
  for (; r + 4 <= rows; r += 4) {
    const float* pr = p + r * lp;
    float* orow = o + r * d;
    const bool prefetch = r == 0;
    int64_t e = 0;
    for (; e + kVecs * lanes <= dv; e += kVecs * lanes)
      rows4_block<L, kVecs>(pr, lp, v, bt, d, e, prefetch, orow);
    const int64_t left = (dv - e) / lanes;  // vectors left, fewer than kVecs (≤ 3)
    if (left & 2) rows4_block<L, 2>(pr, lp, v, bt, d, e, prefetch, orow), e += 2 * lanes;
    if (left & 1) rows4_block<L, 1>(pr, lp, v, bt, d, e, prefetch, orow);
    scalar_tail(r, r + 4, dv);
  }
  for (; r < rows; ++r) {
    float* orow = o + r * d;
    const float* prow = p + r * lp;
    const bool prefetch = r == 0;
    int64_t e = 0;
    for (; e + kRowVecs * lanes <= dv; e += kRowVecs * lanes)
      row1_block<L, kRowVecs>(prow, v, bt, e, prefetch, orow);
    const int64_t left = (dv - e) / lanes;  // vectors left, fewer than kRowVecs (≤ 7)
    if constexpr (kRowVecs > 4)
      if (left & 4) row1_block<L, 4>(prow, v, bt, e, prefetch, orow), e += 4 * lanes;
    if (left & 2) row1_block<L, 2>(prow, v, bt, e, prefetch, orow), e += 2 * lanes;
    if (left & 1) row1_block<L, 1>(prow, v, bt, e, prefetch, orow);
    scalar_tail(r, r + 1, dv);
  }
}

}  // namespace

ValueKernel value_kernel(DType stored) {
  return for_stored(stored,
                    [](auto loader) -> ValueKernel { return &block_accumulate<decltype(loader)>; });
}

}  // namespace attnkit::decode
