// Wide-group decode kernels (decode_wide.hpp), Highway with static dispatch. With the query rows
// as the vector dimension:
//   scores   St[t, r] = Σ_e Qᵀ[e, r]·k[t, e]      register blocks of kWideTok tokens × 2 row vectors;
//                                                  each k element is broadcast once per block; the
//                                                  block's K rows are converted into an L1 tile
//                                                  just before it
//   softmax  fused into the score pass: each register block's max is checked against the row's
//            reference max, then exponentiated in registers (no pass over the scores in memory)
//   values   O[r, :] += Σ_t Pᵀ[t, r]·v[t, :]      register blocks of 4 rows × kWideVecs vectors; the
//                                                  first 4 rows convert each V vector once and
//                                                  leave it in an L1 stage for the others
// No horizontal sums: every FMA lane does useful work. PyTorch: st = k @ q.T; o += st.T @ v.
#include "decode_wide.hpp"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "decode_exp.hpp"
#include "decode_highway.hpp"
#include "decode_reduce_x86.hpp"
#include "hwy/contrib/math/math-inl.h"

namespace attnkit::decode {
namespace {

// Register blocks: AVX-512 has 32 vector registers, AVX2 16.
#if HWY_TARGET <= HWY_AVX3
constexpr int kWideTok = 8;   // tokens per score block: 8 × 2 accumulators
constexpr int kWideVecs = 4;  // vectors per value block: 4 rows × 4 accumulators
#else
constexpr int kWideTok = 4;
constexpr int kWideVecs = 2;
#endif

// Score-loop steps per request of AheadLines: a block of 32 tokens, 32 rows, D 128 runs 512
// steps (AVX-512: 4 register blocks × 128) or 2048 (AVX2: 8 × 2 row vectors × 128), in which the
// block's K and V rows ahead, 128·kBytes lines, are requested once.
template <class L>
constexpr int kAheadEvery = std::max<int>(1, (kWideTok == 8 ? 4 : 16) / L::kBytes);

int64_t lanes() { return int64_t(hn::Lanes(DF())); }

// The 64-byte lines of a block's rows that lie rows.pf bytes ahead (rows before rows.pf_end),
// requested one line per call of next(), which the score kernel spreads over its FMA loop.
// Requested as bursts, a register block's rows at a time, the prefetch instructions stalled the
// core on a cold cache (AMX Xeon: 11 % of the score kernel's samples, against 4 % warm).
class AheadLines {
 public:
  // The lines of `first`'s rows ahead, then those of `*second` (if given).
  AheadLines(const Rows& first, const Rows* second, int64_t bt, int64_t row_bytes)
      : row_bytes_(row_bytes) {
    init(first, bt, row_, stride_, rows_);
    if (second) init(*second, bt, next_row_, next_stride_, next_rows_);
  }
  [[gnu::always_inline]] void next() {
    if (rows_ == 0) {
      if (next_rows_ == 0) return;
      row_ = next_row_, stride_ = next_stride_, rows_ = next_rows_, next_rows_ = 0;
    }
    __builtin_prefetch(row_ + off_, 0, 2);
    off_ += 64;
    if (off_ >= row_bytes_) {
      off_ = 0;
      row_ += stride_;
      --rows_;
    }
  }

 private:
  static void init(const Rows& r, int64_t bt, const std::byte*& row, int64_t& stride, int64_t& rows) {
    stride = r.stride;
    if (r.pf == 0 || bt <= 0) return;
    row = r.base + r.pf;
    if (row < r.pf_end) rows = std::min<int64_t>(bt, (r.pf_end - row + r.stride - 1) / r.stride);
  }
  const std::byte *row_ = nullptr, *next_row_ = nullptr;
  int64_t stride_ = 0, next_stride_ = 0, row_bytes_ = 0, rows_ = 0, next_rows_ = 0, off_ = 0;
};

// Scores of tokens [t, t + T) for the row vectors [r, r + V·lanes) into acc.
template <int T, int V, int kEvery = 0>
HWY_INLINE void score_acc(const float* qt, int64_t ldq, int64_t r, const float* k, int64_t ldk,
                          int64_t t, int64_t d, VF (&acc)[T][V], AheadLines* pf = nullptr) {
  const DF df;
  const int64_t n = lanes();
  HWY_UNROLL_ALL for (int j = 0; j < T; ++j)
    HWY_UNROLL_ALL for (int i = 0; i < V; ++i) acc[j][i] = hn::Zero(df);
  const float* kt = k + t * ldk;
  for (int64_t e = 0; e < d; ++e) {
    if constexpr (kEvery > 0)
      if (e % kEvery == kEvery - 1) pf->next();
    VF q[V];
    HWY_UNROLL_ALL for (int i = 0; i < V; ++i) q[i] = hn::LoadU(df, qt + e * ldq + r + i * n);
    HWY_UNROLL_ALL for (int j = 0; j < T; ++j) {
      const VF kv = hn::Set(df, kt[j * ldk + e]);
      HWY_UNROLL_ALL for (int i = 0; i < V; ++i) acc[j][i] = hn::MulAdd(q[i], kv, acc[j][i]);
    }
  }
}

// Scores of tokens [t, t + T) for the row vectors [r, r + V·lanes).
template <int T, int V>
HWY_INLINE void score_block(const float* qt, int64_t ldq, int64_t r, const float* k, int64_t ldk,
                            int64_t t, int64_t d, float* st, int64_t ldst) {
  const DF df;
  const int64_t n = lanes();
  VF acc[T][V];
  score_acc<T, V>(qt, ldq, r, k, ldk, t, d, acc);
  HWY_UNROLL_ALL for (int j = 0; j < T; ++j)
    HWY_UNROLL_ALL for (int i = 0; i < V; ++i) hn::StoreU(acc[j][i], df, st + (t + j) * ldst + r + i * n);
}

// Raises the reference max of the row vectors [r, r + V·lanes) to at least `top` (their largest
// scores in the current register block): m = max(m, top), and with alpha = exp(m_old - m) the
// sums l, the block's probabilities so far pt[0, t) and the rows of o are rescaled. Rare: the
// first block of a row, and scores that jump by more than e^kLag.
template <int V>
HWY_NOINLINE void raise_max(int64_t r, int64_t t, const VF (&top)[V], VF (&m)[V], VF (&l)[V],
                            float* pt, int64_t ldp, float* o, int64_t d) {
  const DF df;
  const int64_t n = lanes();
  const VF lo = hn::Set(df, kExpFloor);
  HWY_ALIGN float alpha[hn::MaxLanes(df)];
  for (int i = 0; i < V; ++i) {
    const VF m_new = hn::Max(m[i], top[i]);
    const VF dm = hn::Sub(m[i], m_new);  // -inf from a row's first block: alpha 0
    const VF a = hn::IfThenZeroElse(hn::Lt(dm, lo), hn::Exp(df, hn::Max(dm, lo)));
    m[i] = m_new;
    l[i] = hn::Mul(l[i], a);
    for (int64_t u = 0; u < t; ++u) {
      float* p = pt + u * ldp + r + i * n;
      hn::StoreU(hn::Mul(hn::LoadU(df, p), a), df, p);
    }
    hn::Store(a, df, alpha);
    for (int64_t lane = 0; lane < n; ++lane) {
      if (alpha[lane] == 1.0f) continue;
      float* orow = o + (r + i * n + lane) * d;
      const VF s = hn::Set(df, alpha[lane]);
      for (int64_t e = 0; e < d; e += n) hn::StoreU(hn::Mul(hn::LoadU(df, orow + e), s), df, orow + e);
    }
  }
}

// One register block of the fused pass: scores of the T tokens at kt (float32 rows at stride
// ldk; tokens [t, t + T) of the block) for the row vectors [r, r + V·lanes), the reference max m
// raised if they exceed it by more than kLag, then pt = exp(score - m) stored and added to l.
template <int T, int V, int kEvery>
HWY_INLINE void score_softmax_block(const float* qt, int64_t rows, int64_t r, const float* kt,
                                    int64_t ldk, int64_t t, int64_t d, float* pt, float* m,
                                    float* l, float* o, AheadLines& pf) {
  const DF df;
  const int64_t n = lanes();
  VF acc[T][V];
  score_acc<T, V, kEvery>(qt, rows, r, kt, ldk, 0, d, acc, &pf);
  VF mv[V], lv[V], top[V];
  bool raise = false;
  HWY_UNROLL_ALL for (int i = 0; i < V; ++i) {
    mv[i] = hn::LoadU(df, m + r + i * n);
    lv[i] = hn::LoadU(df, l + r + i * n);
    top[i] = acc[0][i];
    HWY_UNROLL_ALL for (int j = 1; j < T; ++j) top[i] = hn::Max(top[i], acc[j][i]);
    raise |= !hn::AllFalse(df, hn::Gt(top[i], hn::Add(mv[i], hn::Set(df, kLag))));
  }
  if (HWY_UNLIKELY(raise)) raise_max<V>(r, t, top, mv, lv, pt, rows, o, d);
  const VF lo = hn::Set(df, kExpFloor);
  HWY_UNROLL_ALL for (int j = 0; j < T; ++j)
    HWY_UNROLL_ALL for (int i = 0; i < V; ++i) {
      // Scores more than e^64 below the reference weigh nothing next to l ≥ 1: clamped, not
      // zeroed.
      const VF p = exp_clamped(hn::Max(hn::Sub(acc[j][i], mv[i]), lo));
      hn::StoreU(p, df, pt + (t + j) * rows + r + i * n);
      lv[i] = hn::Add(lv[i], p);
    }
  HWY_UNROLL_ALL for (int i = 0; i < V; ++i) {
    hn::StoreU(mv[i], df, m + r + i * n);
    hn::StoreU(lv[i], df, l + r + i * n);
  }
}

// The fused pass over T tokens at kt (tokens [t, t + T) of the block) for all rows.
template <int T, int kEvery>
HWY_INLINE void score_softmax_tile(const float* qt, int64_t rows, const float* kt, int64_t ldk,
                                   int64_t t, int64_t d, float* pt, float* m, float* l, float* o,
                                   AheadLines& pf) {
  const int64_t n = lanes();
  int64_t r = 0;
  for (; r + 2 * n <= rows; r += 2 * n)
    score_softmax_block<T, 2, kEvery>(qt, rows, r, kt, ldk, t, d, pt, m, l, o, pf);
  for (; r < rows; r += n) score_softmax_block<T, 1, kEvery>(qt, rows, r, kt, ldk, t, d, pt, m, l, o, pf);
}

// Stored rows → float32 [bt, d], each vector converted once; prefetching r.pf bytes ahead.
template <class L>
HWY_INLINE void stage(const Rows& r, int64_t bt, int64_t d, float* dst) {
  const DF df;
  const int64_t n = lanes(), dv = d - d % n;
  for (int64_t t = 0; t < bt; ++t) {
    const std::byte* row = r.base + t * r.stride;
    float* out = dst + t * d;
    prefetch_ahead(r, row, d * L::kBytes);
    const float c = std::is_same_v<L, LoadI8> ? r.scale_at(t) : 1.0f;
    if constexpr (std::is_same_v<L, LoadI8>) {
      const VF s = hn::Set(df, c);
      for (int64_t e = 0; e < dv; e += n) hn::StoreU(hn::Mul(L::load(row + e * L::kBytes), s), df, out + e);
    } else {
      for (int64_t e = 0; e < dv; e += n) hn::StoreU(L::load(row + e * L::kBytes), df, out + e);
    }
    for (int64_t e = dv; e < d; ++e) out[e] = c * L::one(row + e * L::kBytes);
  }
}

// wide_scores_softmax for K rows stored as L: float32 rows are read in place; others are
// converted kWideTok rows at a time into `tile` [kWideTok, d], just before their register block reads
// them (the tile stays in L1; no pass over the whole block).
template <class L>
void scores_softmax(const float* qt, int64_t rows, const Rows& k, int64_t bt, int64_t d,
                    float* pt, float* m, float* l, float* o, float* tile, const Rows* v_ahead) {
  constexpr bool kInPlace = std::is_same_v<L, LoadF32>;
  AheadLines ahead(k, v_ahead, bt, d * L::kBytes);  // K's (and V's) rows ahead, over the loops
  for (int64_t t = 0; t < bt; t += kWideTok) {
    const int64_t tt = std::min<int64_t>(kWideTok, bt - t);
    // No prefetch distance: `ahead` requests the rows ahead over the score loop.
    const Rows kr{k.base + t * k.stride, k.stride, k.scale ? k.scale + t * k.scale_stride : nullptr,
                  k.scale_stride};
    const float* kt = tile;
    int64_t ldk = d;
    if constexpr (kInPlace) {
      kt = reinterpret_cast<const float*>(kr.base);
      ldk = k.stride / 4;
    } else {
      stage<L>(kr, tt, d, tile);
    }
    constexpr int kEvery = kAheadEvery<L>;
    if (tt == kWideTok) {
      score_softmax_tile<kWideTok, kEvery>(qt, rows, kt, ldk, t, d, pt, m, l, o, ahead);
    } else {
      for (int64_t u = 0; u < tt; ++u)
        score_softmax_tile<1, kEvery>(qt, rows, kt + u * ldk, ldk, t + u, d, pt, m, l, o, ahead);
    }
  }
}

// O rows [r, r + 4) += Σ_t pt[t·rows + r + i]·x_t[e0, e0 + kWideVecs·lanes) for t < bt, with vector
// j of x_t from get(t, j): 4 rows × kWideVecs accumulators.
template <class Get>
HWY_INLINE void value_block(const float* pt, int64_t rows, int64_t r, int64_t bt, int64_t d,
                            int64_t e0, float* o, Get get) {
  const DF df;
  const int64_t n = lanes();
  float* o0 = o + r * d + e0;
  VF acc[4][kWideVecs];
  HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
    HWY_UNROLL_ALL for (int j = 0; j < kWideVecs; ++j) acc[i][j] = hn::LoadU(df, o0 + i * d + j * n);
  for (int64_t t = 0; t < bt; ++t) {
    VF x[kWideVecs];
    HWY_UNROLL_ALL for (int j = 0; j < kWideVecs; ++j) {
      x[j] = get(t, j);
      decode_x86::pin_register(x[j]);  // one load per vector and token, not one per row
    }
    const float* p = pt + t * rows + r;
    HWY_UNROLL_ALL for (int i = 0; i < 4; ++i) {
      const VF pv = hn::Set(df, p[i]);
      HWY_UNROLL_ALL for (int j = 0; j < kWideVecs; ++j) acc[i][j] = hn::MulAdd(pv, x[j], acc[i][j]);
    }
  }
  HWY_UNROLL_ALL for (int i = 0; i < 4; ++i)
    HWY_UNROLL_ALL for (int j = 0; j < kWideVecs; ++j) hn::StoreU(acc[i][j], df, o0 + i * d + j * n);
}

// wide_values_stored for V rows stored as L: the first 4 rows convert each V vector (prefetching
// ahead) and keep it in `stage` [bt, d] for the other rows; float32 rows are read in place.
template <class L>
void values(const float* pt, int64_t rows, const Rows& v, int64_t bt, int64_t d, float* o,
            float* stage) {
  const DF df;
  const int64_t n = lanes();
  constexpr bool kInPlace = std::is_same_v<L, LoadF32>;
  for (int64_t e0 = 0; e0 < d; e0 += kWideVecs * n)
    value_block(pt, rows, 0, bt, d, e0, o, [&](int64_t t, int j) {
      const std::byte* src = v.base + t * v.stride + (e0 + j * n) * L::kBytes;
      if (j == 0) prefetch_ahead(v, src, kWideVecs * n * L::kBytes);
      VF x = L::load(src);
      if constexpr (std::is_same_v<L, LoadI8>) x = hn::Mul(x, hn::Set(df, v.scale_at(t)));
      if constexpr (!kInPlace) hn::StoreU(x, df, stage + t * d + e0 + j * n);
      return x;
    });
  const float* src = kInPlace ? reinterpret_cast<const float*>(v.base) : stage;
  const int64_t ld = kInPlace ? v.stride / 4 : d;
  for (int64_t r = 4; r < rows; r += 4)
    for (int64_t e0 = 0; e0 < d; e0 += kWideVecs * n)
      value_block(pt, rows, r, bt, d, e0, o,
                  [&](int64_t t, int j) { return hn::LoadU(df, src + t * ld + e0 + j * n); });
}

}  // namespace

WideScoresSoftmax wide_scores_softmax(DType stored) {
  return for_stored(stored, [](auto loader) -> WideScoresSoftmax {
    return &scores_softmax<decltype(loader)>;
  });
}

WideValues wide_values_stored(DType stored) {
  return for_stored(stored, [](auto loader) -> WideValues { return &values<decltype(loader)>; });
}

WideStage wide_stage(DType stored) {
  return for_stored(stored, [](auto loader) -> WideStage { return &stage<decltype(loader)>; });
}

bool wide_supported(int64_t rows, int64_t d) {
  return rows % lanes() == 0 && rows >= 2 * lanes() && d % (kWideVecs * lanes()) == 0;
}

void wide_scores(const float* qt, int64_t ldq, int64_t rows, const float* k, int64_t ldk,
                 int64_t bt, int64_t d, float* st, int64_t ldst) {
  const int64_t n = lanes();
  int64_t r = 0;
  for (; r + 2 * n <= rows; r += 2 * n) {
    int64_t t = 0;
    for (; t + kWideTok <= bt; t += kWideTok) score_block<kWideTok, 2>(qt, ldq, r, k, ldk, t, d, st, ldst);
    for (; t < bt; ++t) score_block<1, 2>(qt, ldq, r, k, ldk, t, d, st, ldst);
  }
  for (; r < rows; r += n) {
    int64_t t = 0;
    for (; t + kWideTok <= bt; t += kWideTok) score_block<kWideTok, 1>(qt, ldq, r, k, ldk, t, d, st, ldst);
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

}  // namespace attnkit::decode
