// Wide-group decode kernels (decode_wide.hpp), Highway with static dispatch. With the query rows
// as the vector dimension:
//   scores   St[t, r] = Σ_e Qᵀ[e, r]·k[t, e]      register blocks of kTok tokens × 2 row vectors;
//                                                  each k element is broadcast once per block
//   softmax  column-wise online softmax of St over t, vectorised over rows
//   values   O[r, :] += Σ_t Pᵀ[t, r]·v[t, :]      register blocks of 4 rows × kVecs vectors
// No horizontal sums: every FMA lane does useful work. PyTorch: st = k @ q.T; o += st.T @ v.
#include "decode_wide.hpp"

#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

namespace attnkit::decode {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Register blocks: AVX-512 has 32 vector registers, AVX2 16.
#if HWY_TARGET <= HWY_AVX3
constexpr int kTok = 8;   // tokens per score block: 8 × 2 accumulators
constexpr int kVecs = 4;  // vectors per value block: 4 rows × 4 accumulators
#else
constexpr int kTok = 4;
constexpr int kVecs = 2;
#endif
constexpr float kExpFloor = -64.0f;  // as exp_sub_sum: probabilities below e^-64 become 0
#define HWY_UNROLL_ALL _Pragma("GCC unroll 16")

int64_t lanes() { return int64_t(hn::Lanes(DF())); }

// Scores of tokens [t, t + T) for the row vectors [r, r + V·lanes).
template <int T, int V>
HWY_INLINE void score_block(const float* qt, int64_t ldq, int64_t r, const float* k, int64_t ldk,
                            int64_t t, int64_t d, float* st, int64_t ldst) {
  const DF df;
  const int64_t n = lanes();
  VF acc[T][V];
  HWY_UNROLL_ALL for (int j = 0; j < T; ++j)
    HWY_UNROLL_ALL for (int i = 0; i < V; ++i) acc[j][i] = hn::Zero(df);
  const float* kt = k + t * ldk;
  for (int64_t e = 0; e < d; ++e) {
    VF q[V];
    HWY_UNROLL_ALL for (int i = 0; i < V; ++i) q[i] = hn::LoadU(df, qt + e * ldq + r + i * n);
    HWY_UNROLL_ALL for (int j = 0; j < T; ++j) {
      const VF kv = hn::Set(df, kt[j * ldk + e]);
      HWY_UNROLL_ALL for (int i = 0; i < V; ++i) acc[j][i] = hn::MulAdd(q[i], kv, acc[j][i]);
    }
  }
  HWY_UNROLL_ALL for (int j = 0; j < T; ++j)
    HWY_UNROLL_ALL for (int i = 0; i < V; ++i) hn::StoreU(acc[j][i], df, st + (t + j) * ldst + r + i * n);
}

}  // namespace

bool wide_supported(int64_t rows, int64_t d) {
  return rows % lanes() == 0 && rows >= 2 * lanes() && d % (kVecs * lanes()) == 0;
}

void wide_scores(const float* qt, int64_t ldq, int64_t rows, const float* k, int64_t ldk,
                 int64_t bt, int64_t d, float* st, int64_t ldst) {
  const int64_t n = lanes();
  int64_t r = 0;
  for (; r + 2 * n <= rows; r += 2 * n) {
    int64_t t = 0;
    for (; t + kTok <= bt; t += kTok) score_block<kTok, 2>(qt, ldq, r, k, ldk, t, d, st, ldst);
    for (; t < bt; ++t) score_block<1, 2>(qt, ldq, r, k, ldk, t, d, st, ldst);
  }
  for (; r < rows; r += n) {
    int64_t t = 0;
    for (; t + kTok <= bt; t += kTok) score_block<kTok, 1>(qt, ldq, r, k, ldk, t, d, st, ldst);
    for (; t < bt; ++t) score_block<1, 1>(qt, ldq, r, k, ldk, t, d, st, ldst);
  }
}

void wide_online_softmax(float* st, int64_t ldst, int64_t rows, int64_t bt, float* m, float* l,
                         float* o, int64_t d) {
  const DF df;
  const int64_t n = lanes();
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const VF lo = hn::Set(df, kExpFloor), one = hn::Set(df, 1.0f);
  HWY_ALIGN float alpha[hn::MaxLanes(df)];
  for (int64_t r = 0; r < rows; r += n) {
    VF mx = neg_inf;
    for (int64_t t = 0; t < bt; ++t) mx = hn::Max(mx, hn::LoadU(df, st + t * ldst + r));
    const VF m_old = hn::LoadU(df, m + r);
    const VF m_new = hn::Max(m_old, mx);
    const auto dead = hn::Eq(m_new, neg_inf);  // no visible key yet: P = 0, m and l unchanged
    VF sum = hn::Zero(df);
    for (int64_t t = 0; t < bt; ++t) {
      float* x = st + t * ldst + r;
      const VF z = hn::Sub(hn::LoadU(df, x), m_new);
      const VF e = hn::IfThenZeroElse(hn::Or(hn::Lt(z, lo), dead), hn::Exp(df, hn::Max(z, lo)));
      hn::StoreU(e, df, x);
      sum = hn::Add(sum, e);
    }
    // alpha = exp(m_old - m_new): 1 where the max did not grow, 0 from -inf or below e^-64.
    const VF dm = hn::IfThenElse(dead, hn::Zero(df), hn::Sub(m_old, m_new));
    const VF a = hn::IfThenZeroElse(hn::Lt(dm, lo), hn::Exp(df, hn::Max(dm, lo)));
    const VF grew = hn::IfThenElse(hn::Ne(m_new, m_old), a, one);
    hn::StoreU(hn::MulAdd(hn::LoadU(df, l + r), grew, sum), df, l + r);
    hn::StoreU(hn::IfThenElse(dead, m_old, m_new), df, m + r);
    hn::Store(grew, df, alpha);
    for (int64_t i = 0; i < n; ++i) {
      if (alpha[i] == 1.0f) continue;
      float* orow = o + (r + i) * d;
      const VF s = hn::Set(df, alpha[i]);
      for (int64_t e = 0; e < d; e += n) hn::StoreU(hn::Mul(hn::LoadU(df, orow + e), s), df, orow + e);
    }
  }
}

void wide_values(const float* pt, int64_t ldp, int64_t rows, const float* v, int64_t ldv,
                 int64_t bt, int64_t d, float* o) {
  const DF df;
  const int64_t n = lanes();
  for (int64_t r = 0; r < rows; r += 4)
    for (int64_t e0 = 0; e0 < d; e0 += kVecs * n) {
      float* o0 = o + r * d + e0;
      VF acc[4][kVecs];
      HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
        HWY_UNROLL_ALL for (int j = 0; j < kVecs; ++j) acc[i][j] = hn::LoadU(df, o0 + i * d + j * n);
      for (int64_t t = 0; t < bt; ++t) {
        VF x[kVecs];
        HWY_UNROLL_ALL for (int j = 0; j < kVecs; ++j) x[j] = hn::LoadU(df, v + t * ldv + e0 + j * n);
        const float* p = pt + t * ldp + r;
        HWY_UNROLL_ALL for (int i = 0; i < 4; ++i) {
          const VF pv = hn::Set(df, p[i]);
          HWY_UNROLL_ALL for (int j = 0; j < kVecs; ++j) acc[i][j] = hn::MulAdd(pv, x[j], acc[i][j]);
        }
      }
      HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
        HWY_UNROLL_ALL for (int j = 0; j < kVecs; ++j) hn::StoreU(acc[i][j], df, o0 + i * d + j * n);
    }
}

}  // namespace attnkit::decode
