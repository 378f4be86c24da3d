// Decode scores fused with the online softmax, for blocks of 4 query rows (GQA groups) and keys
// that every row sees, on AVX2 (Highway's static target): a register block of 4 rows × kFusedTok = 2
// tokens of dot-product accumulators (8 of the 16 registers) becomes one vector of its 8 scores
// through one transposing reduction (decode_reduce_x86.hpp); that vector is checked against the
// rows' reference max and exponentiated in the register, so the scores never make the separate
// max and exp passes of online_softmax_row. Each converted K vector serves the 4 rows of its
// block. PyTorch: p = exp(q @ k.T - m); l += p.sum(-1).
// AVX-512 builds take the three-pass path (score kernel, online_softmax_row): on AMD Zen 5 the
// AVX-512 form of this kernel (4 rows × 4 tokens) was 7–14 % slower than it in every setting
// measured idle (1 and 2 threads, cold and warm cache; docs/performance.md), while on AVX2 the
// fused kernel is the faster one.
#include <algorithm>
#include <cmath>

#include "decode_exp.hpp"
#include "decode_highway.hpp"
#include "decode_kernels.hpp"
#if HWY_TARGET == HWY_AVX2
#include "decode_reduce_x86.hpp"
#endif

namespace attnkit::decode {
namespace {

#if HWY_TARGET == HWY_AVX2
constexpr int kFusedTok = kBlockCols;  // tokens per register block; 4 · kFusedTok = the vector's lanes
static_assert(4 * kFusedTok == int(hn::MaxLanes(DF())));

// The reference max of rows [r, r + 4) in the layout of a block's score vector:
// lane kFusedTok·i + j = m[r + i].
HWY_INLINE VF row_groups(const float* m, int64_t r) {
  return VF{_mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(m + r)),
                                     _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))};
}

// The block's 4 · kFusedTok scores, lane kFusedTok·i + j = Σ acc[i][j] (row i, token j).
HWY_INLINE VF block_sums(const VF (&acc)[4][kFusedTok]) {
  const __m256 v[8] = {acc[0][0].raw, acc[0][1].raw, acc[1][0].raw, acc[1][1].raw,
                       acc[2][0].raw, acc[2][1].raw, acc[3][0].raw, acc[3][1].raw};
  return VF{decode_x86::transpose_reduce8(v)};
}

// c[j] (j < kFusedTok) in every lane kFusedTok·i + j.
HWY_INLINE VF token_groups(const float* c) {
  return VF{_mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(c)))};
}

// The lanes of tokens j < nt (the block's tokens that exist) as a vector mask; select(valid, a, b)
// takes a's lanes there and b's elsewhere.
HWY_INLINE VF valid_lanes(int64_t nt) {
  const __m256 lane = _mm256_setr_ps(0, 1, 0, 1, 0, 1, 0, 1);
  return VF{_mm256_cmp_ps(lane, _mm256_set1_ps(float(nt)), _CMP_LT_OQ)};
}
HWY_INLINE VF select(VF valid, VF a, VF b) { return VF{_mm256_blendv_ps(b.raw, a.raw, valid.raw)}; }

// Stores the block's probabilities p (lane kFusedTok·i + j: row i, token j) to out[i·ls + j], all kFusedTok
// tokens of each row.
HWY_INLINE void store_block(VF p, float* out, int64_t ls) {
  const __m128 lo = _mm256_castps256_ps128(p.raw), hi = _mm256_extractf128_ps(p.raw, 1);
  _mm_storel_pi(reinterpret_cast<__m64*>(out), lo);
  _mm_storeh_pi(reinterpret_cast<__m64*>(out + ls), lo);
  _mm_storel_pi(reinterpret_cast<__m64*>(out + 2 * ls), hi);
  _mm_storeh_pi(reinterpret_cast<__m64*>(out + 3 * ls), hi);
}

// The sum of one row's kFusedTok = 2 lanes li[0], li[1].
HWY_INLINE float row_lane_sum(const float* li) { return li[0] + li[1]; }

// Raises the reference max of each row r + i (i < 4) whose scores (lanes kFusedTok·i + j of `sums`;
// -inf in lanes of absent tokens) exceed it by more than kLag, to the row's largest score: with
// alpha = exp(m_old - m_new) (0 from -inf), l[r + i] plus the row's lanes of lv (then cleared),
// the row's probabilities so far s[(r + i)·ls, + done) and o's row r + i (o [rows, d]) are
// rescaled; m and mv get the new max. Rare: a row's first block, and score jumps above e^kLag.
HWY_NOINLINE void raise_rows(VF sums, int64_t r, float* s, int64_t ls, int64_t done, float* m,
                             float* l, float* o, int64_t d, VF& mv, VF& lv) {
  const DF df;
  HWY_ALIGN float sv[4 * kFusedTok], lsum[4 * kFusedTok];
  hn::Store(sums, df, sv);
  hn::Store(lv, df, lsum);
  for (int i = 0; i < 4; ++i) {
    const float* si = sv + kFusedTok * i;
    float* li = lsum + kFusedTok * i;
    const float top = *std::max_element(si, si + kFusedTok);
    if (!(top > m[r + i] + kLag)) continue;
    const float dm = m[r + i] - top;
    const float alpha = dm < kExpFloor ? 0.0f : std::exp(dm);
    l[r + i] = (l[r + i] + row_lane_sum(li)) * alpha;
    std::fill(li, li + kFusedTok, 0.0f);
    float* srow = s + (r + i) * ls;
    for (int64_t u = 0; u < done; ++u) srow[u] *= alpha;
    const VF a = hn::Set(df, alpha);
    float* orow = o + (r + i) * d;
    for (int64_t e = 0; e < d; e += int64_t(hn::Lanes(df)))
      hn::StoreU(hn::Mul(hn::LoadU(df, orow + e), a), df, orow + e);
    m[r + i] = top;
  }
  lv = hn::Load(df, lsum);
  mv = row_groups(m, r);
}

// score_softmax_kernel's kernel for K rows stored as L (rows % 4 == 0, d a multiple of the lanes).
template <class L>
void scores_softmax(const float* q, int64_t rows, const Rows& k, int64_t bt, int64_t d, float* s,
                    int64_t ls, int64_t t0, float* m, float* l, float* o) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  const VF lo = hn::Set(df, kExpFloor), lag = hn::Set(df, kLag), neg_inf = hn::Set(df, -INFINITY);
  for (int64_t r = 0; r < rows; r += 4) {
    const float* q0 = q + r * d;
    VF mv = row_groups(m, r), lv = hn::Zero(df);
    for (int64_t t = 0; t < bt; t += kFusedTok) {
      const int64_t nt = std::min<int64_t>(kFusedTok, bt - t);
      const std::byte* kt[kFusedTok];
      HWY_UNROLL_ALL for (int j = 0; j < kFusedTok; ++j) kt[j] = k.base + (t + std::min<int64_t>(j, nt - 1)) * k.stride;
      if (r == 0) for (int64_t j = 0; j < nt; ++j) prefetch_ahead(k, kt[j], d * L::kBytes);
      VF acc[4][kFusedTok];
      HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
        HWY_UNROLL_ALL for (int j = 0; j < kFusedTok; ++j) acc[i][j] = hn::Zero(df);
      for (int64_t e = 0; e < d; e += lanes) {
        VF x[kFusedTok];
        HWY_UNROLL_ALL for (int j = 0; j < kFusedTok; ++j) x[j] = L::load(kt[j] + e * L::kBytes);
        HWY_UNROLL_ALL for (int i = 0; i < 4; ++i) {
          auto qv = hn::LoadU(df, q0 + i * d + e);
          decode_x86::pin_register(qv);  // one load per row and step, not kFusedTok
          HWY_UNROLL_ALL for (int j = 0; j < kFusedTok; ++j) acc[i][j] = hn::MulAdd(qv, x[j], acc[i][j]);
        }
      }
      VF sums = block_sums(acc);  // lane kFusedTok·i + j: row r + i, token t + j
      if (k.scale) {
        alignas(16) float c[kFusedTok];
        for (int j = 0; j < kFusedTok; ++j) c[j] = k.scale_at(t + std::min<int64_t>(j, nt - 1));
        sums = hn::Mul(sums, token_groups(c));
      }
      const auto valid = valid_lanes(nt);
      const VF sv = select(valid, sums, neg_inf);
      if (HWY_UNLIKELY(!hn::AllFalse(df, hn::Gt(sv, hn::Add(mv, lag)))))
        raise_rows(sv, r, s, ls, t0 + t, m, l, o, d, mv, lv);
      // Scores more than e^64 below the reference weigh nothing next to l ≥ 1: clamped, not zeroed.
      const VF p = select(valid, exp_clamped(hn::Max(hn::Sub(sv, mv), lo)), hn::Zero(df));
      lv = hn::Add(lv, p);
      float* out = s + r * ls + t0 + t;
      if (nt == kFusedTok) {
        store_block(p, out, ls);
      } else {
        HWY_ALIGN float pv[4 * kFusedTok];
        hn::Store(p, df, pv);
        for (int i = 0; i < 4; ++i) std::copy(pv + kFusedTok * i, pv + kFusedTok * i + nt, out + i * ls);
      }
    }
    HWY_ALIGN float lsum[4 * kFusedTok];
    hn::Store(lv, df, lsum);
    for (int i = 0; i < 4; ++i) l[r + i] += row_lane_sum(lsum + kFusedTok * i);
  }
}
#endif

}  // namespace

ScoreSoftmaxKernel score_softmax_kernel([[maybe_unused]] DType stored, [[maybe_unused]] int64_t rows,
                                        [[maybe_unused]] int64_t d) {
#if HWY_TARGET == HWY_AVX2
  if (rows % 4 == 0 && d % int64_t(hn::Lanes(DF())) == 0)
    return for_stored(stored, [](auto loader) -> ScoreSoftmaxKernel {
      return &scores_softmax<decltype(loader)>;
    });
#endif
  return nullptr;
}

}  // namespace attnkit::decode
