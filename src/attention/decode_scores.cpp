// Decode scores S = Q·Kᵀ against stored K rows, converted in registers (Highway, static target).
// Register blocks of 4 query rows × kTok tokens of dot-product accumulators (AVX-512: 4 × 4,
// AVX2: 4 × 3 then 4 × 2; 1 row × 4 tokens for leftover rows); each converted k vector serves
// every row of its block, and one transposing reduction (decode_reduce_x86.hpp) turns a block's
// accumulators into its scores. PyTorch: s = q @ k.T.
#include <algorithm>

#include "decode_highway.hpp"
#include "decode_kernels.hpp"
#if HWY_TARGET <= HWY_AVX2
#include "decode_reduce_x86.hpp"
#endif

namespace attnkit::decode {
namespace {

constexpr int kTok = kBlockCols;  // tokens per score block

// Horizontal sums of four vectors: {Σa0, Σa1, Σa2, Σa3} in one 4-lane vector. Halves wide
// vectors down to 128 bits, then finishes with two interleave-add rounds.
template <class D, class V>
HWY_INLINE auto reduce4(D d, V a0, V a1, V a2, V a3) {
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::Half<D> dh;
    return reduce4(dh, hn::Add(hn::LowerHalf(dh, a0), hn::UpperHalf(dh, a0)),
                   hn::Add(hn::LowerHalf(dh, a1), hn::UpperHalf(dh, a1)),
                   hn::Add(hn::LowerHalf(dh, a2), hn::UpperHalf(dh, a2)),
                   hn::Add(hn::LowerHalf(dh, a3), hn::UpperHalf(dh, a3)));
  } else {
    const hn::Repartition<double, D> dd;
    const auto t0 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
    const auto t1 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
    const auto lo = hn::BitCast(d, hn::InterleaveLower(dd, hn::BitCast(dd, t0), hn::BitCast(dd, t1)));
    const auto hi = hn::BitCast(d, hn::InterleaveUpper(dd, hn::BitCast(dd, t0), hn::BitCast(dd, t1)));
    return hn::Add(lo, hi);
  }
}


#if HWY_TARGET == HWY_AVX2
// s[i·ls + j] = q_i·k_{t+j} for 4 rows i × 3 tokens j (q [4, d] float32, d a multiple of the
// lane count): 12 accumulators, 3 converted k vectors and one q vector fill the 16 AVX2
// registers, so each q load serves 3 tokens and each converted k vector 4 rows.
template <class L>
HWY_INLINE void scores_4x3(const float* q, int64_t d, const Rows& k, int64_t t, bool prefetch,
                           float* s, int64_t ls) {
  const DF df;
  const std::byte* kt[3] = {k.base + t * k.stride, k.base + (t + 1) * k.stride,
                            k.base + (t + 2) * k.stride};
  if (prefetch) HWY_UNROLL_ALL for (int j = 0; j < 3; ++j) prefetch_ahead(k, kt[j], d * L::kBytes);
  VF acc[4][3];
  HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
    HWY_UNROLL_ALL for (int j = 0; j < 3; ++j) acc[i][j] = hn::Zero(df);
  for (int64_t e = 0; e < d; e += int64_t(hn::Lanes(df))) {
    VF x[3];
    HWY_UNROLL_ALL for (int j = 0; j < 3; ++j) x[j] = L::load(kt[j] + e * L::kBytes);
    HWY_UNROLL_ALL for (int i = 0; i < 4; ++i) {
      auto qv = hn::LoadU(df, q + i * d + e);
      decode_x86::pin_register(qv);  // one load per row and step
      HWY_UNROLL_ALL for (int j = 0; j < 3; ++j) acc[i][j] = hn::MulAdd(qv, x[j], acc[i][j]);
    }
  }
  const float c[3] = {k.scale_at(t), k.scale_at(t + 1), k.scale_at(t + 2)};
  decode_x86::store_sums_4x2(acc, c, s, ls);  // tokens 0 and 1
  alignas(16) float sum4[4];                  // lane i: row i, token 2
  hn::Store(reduce4(df, acc[0][2], acc[1][2], acc[2][2], acc[3][2]), hn::FixedTag<float, 4>(), sum4);
  for (int i = 0; i < 4; ++i) s[i * ls + 2] = c[2] * sum4[i];
}
#endif

// s[r·ls + t] = q_r·k_t for r < rows, t < bt (q [rows, d] float32, k stored rows). Register
// blocks of 4 rows × kTok tokens (independent FMA chains) or 1 row × 4 tokens for leftover rows;
// each converted k vector serves every row of the block.
template <class L>
void block_scores(const float* q, int64_t rows, const Rows& k, int64_t bt, int64_t d, float* s,
                  int64_t ls) {
  const DF df;
  const hn::FixedTag<float, 4> d4;
  const int64_t lanes = int64_t(hn::Lanes(df)), dv = d - d % lanes;
  alignas(64) float out[4];
  auto tail = [&](const float* x, const std::byte* y) {  // the d % lanes leftover elements
    float acc = 0;
    for (int64_t e = dv; e < d; ++e) acc += x[e] * L::one(y + e * L::kBytes);
    return acc;
  };
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* q0 = q + r * d;
    int64_t t = 0;
#if HWY_TARGET == HWY_AVX2
    if (dv == d) {  // blocks of 3 tokens, then of 2 (never a single token left when bt > 1)
      int64_t triples = bt / 3;
      if (bt - 3 * triples == 1 && triples > 0) --triples;
      for (; t < 3 * triples; t += 3) scores_4x3<L>(q0, d, k, t, r == 0, s + r * ls + t, ls);
    }
#endif
    for (; t + kTok <= bt; t += kTok) {  // 4 rows × kTok tokens of accumulators
      const std::byte* kt[kTok];
      VF acc[4][kTok];
      HWY_UNROLL_ALL for (int j = 0; j < kTok; ++j) kt[j] = k.base + (t + j) * k.stride;
      if (r == 0) HWY_UNROLL_ALL for (int j = 0; j < kTok; ++j) prefetch_ahead(k, kt[j], d * L::kBytes);
      HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
        HWY_UNROLL_ALL for (int j = 0; j < kTok; ++j) acc[i][j] = hn::Zero(df);
      for (int64_t e = 0; e < dv; e += lanes) {
        VF x[kTok];
        HWY_UNROLL_ALL for (int j = 0; j < kTok; ++j) x[j] = L::load(kt[j] + e * L::kBytes);
        HWY_UNROLL_ALL for (int i = 0; i < 4; ++i) {
          auto qv = hn::LoadU(df, q0 + i * d + e);
#if HWY_TARGET == HWY_AVX2
          decode_x86::pin_register(qv);  // one load per row and step, not kTok
#endif
          HWY_UNROLL_ALL for (int j = 0; j < kTok; ++j) acc[i][j] = hn::MulAdd(qv, x[j], acc[i][j]);
        }
      }
#if HWY_TARGET <= HWY_AVX2
      if (dv == d) {  // one transpose-reduction for the whole block
        float c[kTok];
        HWY_UNROLL_ALL for (int j = 0; j < kTok; ++j) c[j] = k.scale_at(t + j);
#if HWY_TARGET <= HWY_AVX3
        decode_x86::store_sums_4x4(acc, k.scale ? c : nullptr, s + r * ls + t, ls);
#else
        decode_x86::store_sums_4x2(acc, k.scale ? c : nullptr, s + r * ls + t, ls);
#endif
        continue;
      }
#endif
      HWY_UNROLL_ALL for (int j = 0; j < kTok; ++j) {
        hn::Store(reduce4(df, acc[0][j], acc[1][j], acc[2][j], acc[3][j]), d4, out);
        const float c = k.scale_at(t + j);
        for (int i = 0; i < 4; ++i) s[(r + i) * ls + t + j] = c * (out[i] + tail(q0 + i * d, kt[j]));
      }
    }
    for (; t < bt; ++t) {
      const std::byte* k0 = k.base + t * k.stride;
      for (int j = 0; j < 4; ++j) {
        auto a = hn::Zero(df);
        for (int64_t e = 0; e < dv; e += lanes)
          a = hn::MulAdd(hn::LoadU(df, q0 + j * d + e), L::load(k0 + e * L::kBytes), a);
        s[(r + j) * ls + t] = k.scale_at(t) * (hn::GetLane(hn::SumOfLanes(df, a)) + tail(q0 + j * d, k0));
      }
    }
  }
  for (; r < rows; ++r) {
    const float* qr = q + r * d;
    for (int64_t t = 0; t < bt; t += 4) {
      const int64_t nt = std::min<int64_t>(4, bt - t);
      const std::byte* kt[4];
      for (int j = 0; j < 4; ++j) kt[j] = k.base + (t + std::min<int64_t>(j, nt - 1)) * k.stride;
      if (r == 0) for (int j = 0; j < nt; ++j) prefetch_ahead(k, kt[j], d * L::kBytes);
      auto a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t e = 0; e < dv; e += lanes) {
        const auto qv = hn::LoadU(df, qr + e);
        a0 = hn::MulAdd(qv, L::load(kt[0] + e * L::kBytes), a0);
        a1 = hn::MulAdd(qv, L::load(kt[1] + e * L::kBytes), a1);
        a2 = hn::MulAdd(qv, L::load(kt[2] + e * L::kBytes), a2);
        a3 = hn::MulAdd(qv, L::load(kt[3] + e * L::kBytes), a3);
      }
      const auto sums = reduce4(df, a0, a1, a2, a3);
      if (nt == 4 && dv == d && !k.scale) {  // four whole tokens, no scales: one store
        hn::StoreU(sums, d4, s + r * ls + t);
        continue;
      }
      hn::Store(sums, d4, out);
      for (int64_t j = 0; j < nt; ++j) s[r * ls + t + j] = k.scale_at(t + j) * (out[j] + tail(qr, kt[j]));
    }
  }
}


}  // namespace

ScoreKernel score_kernel(DType stored) {
  return for_stored(stored, [](auto loader) -> ScoreKernel { return &block_scores<decltype(loader)>; });
}

}  // namespace attnkit::decode
