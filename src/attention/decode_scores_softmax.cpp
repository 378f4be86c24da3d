// Decode scores fused with the online softmax, for blocks of 4 query rows (GQA groups) and keys
// that every row sees (AVX-512, Highway static target): a register block of 4 rows × 4 tokens of
// dot-product accumulators becomes one vector of its 16 scores through one transposing reduction
// (decode_reduce_x86.hpp); that vector is checked against the rows' reference max and
// exponentiated in the register, so the scores never make the separate max and exp passes of
// online_softmax_row. PyTorch: p = exp(q @ k.T - m); l += p.sum(-1).
#include <algorithm>
#include <cmath>

#include "decode_exp.hpp"
#include "decode_highway.hpp"
#include "decode_kernels.hpp"
#if HWY_TARGET <= HWY_AVX3
#include "decode_reduce_x86.hpp"
#endif

namespace attnkit::decode {
namespace {

#if HWY_TARGET <= HWY_AVX3
// The reference max of rows [r, r + 4) in the layout of a block's score vector: lane 4i + j = m[r + i].
HWY_INLINE VF row_groups(const float* m, int64_t r) {
  return VF{_mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                  _mm512_castps128_ps512(_mm_loadu_ps(m + r)))};
}

// Raises the reference max of each row r + i (i < 4) whose scores (lanes 4i..4i+3 of `sums`;
// -inf in lanes of absent tokens) exceed it by more than kLag, to the row's largest score: with
// alpha = exp(m_old - m_new) (0 from -inf), l[r + i] plus the row's lanes of lv (then cleared),
// the row's probabilities so far s[(r + i)·ls, + done) and o's row r + i (o [rows, d]) are
// rescaled; m and mv get the new max. Rare: a row's first block, and score jumps above e^kLag.
HWY_NOINLINE void raise_rows(VF sums, int64_t r, float* s, int64_t ls, int64_t done, float* m,
                             float* l, float* o, int64_t d, VF& mv, VF& lv) {
  const DF df;
  HWY_ALIGN float sv[16], lsum[16];
  hn::Store(sums, df, sv);
  hn::Store(lv, df, lsum);
  for (int i = 0; i < 4; ++i) {
    const float top = std::max({sv[4 * i], sv[4 * i + 1], sv[4 * i + 2], sv[4 * i + 3]});
    if (!(top > m[r + i] + kLag)) continue;
    const float dm = m[r + i] - top;
    const float alpha = dm < kExpFloor ? 0.0f : std::exp(dm);
    l[r + i] = (l[r + i] + ((lsum[4 * i] + lsum[4 * i + 1]) + (lsum[4 * i + 2] + lsum[4 * i + 3]))) * alpha;
    std::fill(lsum + 4 * i, lsum + 4 * i + 4, 0.0f);
    float* srow = s + (r + i) * ls;
    for (int64_t u = 0; u < done; ++u) srow[u] *= alpha;
    const VF a = hn::Set(df, alpha);
    float* orow = o + (r + i) * d;
    for (int64_t e = 0; e < d; e += 16) hn::StoreU(hn::Mul(hn::LoadU(df, orow + e), a), df, orow + e);
    m[r + i] = top;
  }
  lv = hn::Load(df, lsum);
  mv = row_groups(m, r);
}

// score_softmax_kernel's kernel for K rows stored as L (rows % 4 == 0, d % 16 == 0).
template <class L>
void scores_softmax(const float* q, int64_t rows, const Rows& k, int64_t bt, int64_t d, float* s,
                    int64_t ls, int64_t t0, float* m, float* l, float* o) {
  const DF df;
  const VF lo = hn::Set(df, kExpFloor), lag = hn::Set(df, kLag);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  for (int64_t r = 0; r < rows; r += 4) {
    const float* q0 = q + r * d;
    VF mv = row_groups(m, r), lv = hn::Zero(df);
    for (int64_t t = 0; t < bt; t += 4) {
      const int64_t nt = std::min<int64_t>(4, bt - t);
      const std::byte* kt[4];
      HWY_UNROLL_ALL for (int j = 0; j < 4; ++j) kt[j] = k.base + (t + std::min<int64_t>(j, nt - 1)) * k.stride;
      if (r == 0) for (int64_t j = 0; j < nt; ++j) prefetch_ahead(k, kt[j], d * L::kBytes);
      VF acc[4][4];
      HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
        HWY_UNROLL_ALL for (int j = 0; j < 4; ++j) acc[i][j] = hn::Zero(df);
      for (int64_t e = 0; e < d; e += 16) {
        VF x[4];
        HWY_UNROLL_ALL for (int j = 0; j < 4; ++j) x[j] = L::load(kt[j] + e * L::kBytes);
        HWY_UNROLL_ALL for (int i = 0; i < 4; ++i) {
          const VF qv = hn::LoadU(df, q0 + i * d + e);
          HWY_UNROLL_ALL for (int j = 0; j < 4; ++j) acc[i][j] = hn::MulAdd(qv, x[j], acc[i][j]);
        }
      }
      __m512 sums = decode_x86::transpose_reduce16(acc);  // lane 4i + j: row r + i, token t + j
      if (k.scale) {
        alignas(16) float c[4];
        for (int j = 0; j < 4; ++j) c[j] = k.scale_at(t + std::min<int64_t>(j, nt - 1));
        sums = _mm512_mul_ps(sums, _mm512_broadcast_f32x4(_mm_load_ps(c)));
      }
      const __mmask16 group = __mmask16((1u << nt) - 1);
      const __mmask16 valid = __mmask16(group | group << 4 | group << 8 | group << 12);
      VF sv{_mm512_mask_blend_ps(valid, neg_inf, sums)};
      if (HWY_UNLIKELY(!hn::AllFalse(df, hn::Gt(sv, hn::Add(mv, lag)))))
        raise_rows(sv, r, s, ls, t0 + t, m, l, o, d, mv, lv);
      // Scores more than e^64 below the reference weigh nothing next to l ≥ 1: clamped, not zeroed.
      const VF p{_mm512_maskz_mov_ps(valid, exp_clamped(hn::Max(hn::Sub(sv, mv), lo)).raw)};
      lv = hn::Add(lv, p);
      float* out = s + r * ls + t0 + t;
      if (nt == 4) {
        _mm_storeu_ps(out, _mm512_castps512_ps128(p.raw));
        _mm_storeu_ps(out + ls, _mm512_extractf32x4_ps(p.raw, 1));
        _mm_storeu_ps(out + 2 * ls, _mm512_extractf32x4_ps(p.raw, 2));
        _mm_storeu_ps(out + 3 * ls, _mm512_extractf32x4_ps(p.raw, 3));
      } else {
        HWY_ALIGN float pv[16];
        hn::Store(p, df, pv);
        for (int i = 0; i < 4; ++i) std::copy(pv + 4 * i, pv + 4 * i + nt, out + i * ls);
      }
    }
    HWY_ALIGN float lsum[16];
    hn::Store(lv, df, lsum);
    for (int i = 0; i < 4; ++i)
      l[r + i] += (lsum[4 * i] + lsum[4 * i + 1]) + (lsum[4 * i + 2] + lsum[4 * i + 3]);
  }
}
#endif

}  // namespace

ScoreSoftmaxKernel score_softmax_kernel([[maybe_unused]] DType stored, [[maybe_unused]] int64_t rows,
                                        [[maybe_unused]] int64_t d) {
#if HWY_TARGET <= HWY_AVX3
  if (rows % 4 == 0 && d % int64_t(hn::Lanes(DF())) == 0)
    return for_stored(stored, [](auto loader) -> ScoreSoftmaxKernel {
      return &scores_softmax<decltype(loader)>;
    });
#endif
  return nullptr;
}

}  // namespace attnkit::decode
