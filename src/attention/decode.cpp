// Split-KV decode (flash-decoding) over a KV cache. Loop nest of one work item (a sequence and a
// chunk of its cache, read in address order):
//   for each block of bt tokens:
//     for each sub-block, each KV head hk:  S[n·G, sub] = Q_hk·K[sub, hk]ᵀ
//     for each KV head hk:                  softcap; ALiBi bias; mask; online softmax
//     for each sub-block, each KV head hk:  O_hk[n·G, D] += P·V[sub, hk]
// Stored K/V are converted in registers (no float32 copy of the cache). Each kernel prefetches
// the rows it reads `ahead` tokens further on, interleaved with its FMAs (see run_as).
// The G query heads of a KV head share each converted K/V vector, so arithmetic intensity grows
// with G. Chunks of kChunk tokens are merged with their (max, sum) pairs; the chunking depends on the
// cache contents only, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <unistd.h>

#include "attnkit/attention/decode.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/core/workspace.hpp"
#include "attnkit/ops/rope.hpp"
#include "attnkit/ops/vec_math.hpp"
#include "../kv/kv_loaders.hpp"
#include "flash_common.hpp"
#include "hwy/highway.h"
#if HWY_TARGET <= HWY_AVX2
#include <immintrin.h>
#endif

namespace attnkit {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

using flash::kNegInf;

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

#if HWY_TARGET <= HWY_AVX3
// Sixteen dot-product accumulators (AVX-512, 16 lanes each) → one vector of their sums, lane
// 4i + j = Σ acc[i][j]: two rounds of 256/128-bit block shuffles, then two of in-block unpacks
// (45 instructions, against 88 for four reduce4 calls).
HWY_INLINE __m512 transpose_reduce16(const hn::Vec<hn::ScalableTag<float>> (&acc)[4][4]) {
  __m512 v[16];  // v[4j + i] = acc[i][j]
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) v[4 * j + i] = acc[i][j].raw;
  __m512 c[8];  // c[p] blocks: [v0.b0+v0.b2, v0.b1+v0.b3, v1.b0+v1.b2, v1.b1+v1.b3] of pair p
  for (int p = 0; p < 8; ++p)
    c[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
  __m512 e[4];  // block k of e[m]: the 4-lane partial sums of v[4m + k]
  for (int m = 0; m < 4; ++m)
    e[m] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], 0xDD));
  const __m512 g = _mm512_add_ps(_mm512_unpacklo_ps(e[0], e[1]), _mm512_unpackhi_ps(e[0], e[1]));
  const __m512 h = _mm512_add_ps(_mm512_unpacklo_ps(e[2], e[3]), _mm512_unpackhi_ps(e[2], e[3]));
  const __m512d gd = _mm512_castps_pd(g), hd = _mm512_castps_pd(h);
  // Lane 4k + m: Σ v[4m + k] = Σ acc[k][m].
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(gd, hd)),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(gd, hd)));
}
#elif HWY_TARGET == HWY_AVX2
// Eight dot-product accumulators (AVX2, 8 lanes each) → one vector of their sums, lane k = Σ v[k]:
// in-block unpacks of float pairs, then of 64-bit pairs, then the two 128-bit halves added
// (21 instructions, against 34 for two reduce4 calls).
HWY_INLINE __m256 transpose_reduce8(const __m256 (&v)[8]) {
  __m256 c[4];  // per 128-bit block: [a0+a2, b0+b2, a1+a3, b1+b3] of a = v[2p], b = v[2p + 1]
  for (int p = 0; p < 4; ++p)
    c[p] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * p], v[2 * p + 1]),
                         _mm256_unpackhi_ps(v[2 * p], v[2 * p + 1]));
  __m256 e[2];  // per 128-bit block: the block's sums of v[4m], v[4m + 1], v[4m + 2], v[4m + 3]
  for (int m = 0; m < 2; ++m) {
    const __m256d x = _mm256_castps_pd(c[2 * m]), y = _mm256_castps_pd(c[2 * m + 1]);
    e[m] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)),
                         _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
  }
  return _mm256_add_ps(_mm256_permute2f128_ps(e[0], e[1], 0x20),
                       _mm256_permute2f128_ps(e[0], e[1], 0x31));
}
#endif

using kv_loaders::DF;
using kv_loaders::LoadBF16;
using kv_loaders::LoadF16;
using kv_loaders::LoadF32;
using kv_loaders::LoadI8;
using kv_loaders::VF;

// Register blocking: AVX-512 has 32 vector registers, AVX2 16.
#if HWY_TARGET <= HWY_AVX3
constexpr int kTok = 4;   // tokens per score block (4 rows × 4 tokens of accumulators)
constexpr int kVecs = 4;  // vectors per P·V block (4 rows × 4 vectors)
#else
constexpr int kTok = 2;
constexpr int kVecs = 2;
#endif
#define HWY_UNROLL_ALL _Pragma("GCC unroll 16")

// Rows of one KV head inside a stage: token t's row starts at base + t·stride bytes; int8 rows
// carry scale[t·scale_stride].
struct Rows {
  const std::byte* base;
  int64_t stride;
  const float* scale;
  int64_t scale_stride;
  float scale_at(int64_t t) const { return scale ? scale[t * scale_stride] : 1.0f; }
  int64_t pf = 0;                    // prefetch distance in bytes (0: none)
  const std::byte* pf_end = nullptr; // rows at or past this address are not prefetched
};

// Pulls [p, p + bytes) toward the core (into L2) in address order.
HWY_INLINE void prefetch_range(const std::byte* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 2);
}

// Requests `bytes` of the row that lies rows.pf bytes after `row`, if it is inside the run.
HWY_INLINE void prefetch_ahead(const Rows& rows, const std::byte* row, int64_t bytes) {
  const std::byte* p = row + rows.pf;
  if (rows.pf != 0 && p < rows.pf_end) prefetch_range(p, bytes);
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
      asm("" : "+x"(qv.raw));  // one load per row and step (see block_scores)
      HWY_UNROLL_ALL for (int j = 0; j < 3; ++j) acc[i][j] = hn::MulAdd(qv, x[j], acc[i][j]);
    }
  }
  const __m256 v[8] = {acc[0][0].raw, acc[0][1].raw, acc[1][0].raw, acc[1][1].raw,
                       acc[2][0].raw, acc[2][1].raw, acc[3][0].raw, acc[3][1].raw};
  alignas(32) float sum8[8];  // lane 2i + j: row i, token j < 2
  alignas(16) float sum4[4];  // lane i: row i, token 2
  _mm256_store_ps(sum8, transpose_reduce8(v));
  hn::Store(reduce4(df, acc[0][2], acc[1][2], acc[2][2], acc[3][2]), hn::FixedTag<float, 4>(), sum4);
  const float c0 = k.scale_at(t), c1 = k.scale_at(t + 1), c2 = k.scale_at(t + 2);
  for (int i = 0; i < 4; ++i) {
    s[i * ls] = c0 * sum8[2 * i];
    s[i * ls + 1] = c1 * sum8[2 * i + 1];
    s[i * ls + 2] = c2 * sum4[i];
  }
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
          // Keep q in a register: as a memory operand of each FMA it would be loaded kTok times,
          // and loads (not FMAs) would bound the loop.
          asm("" : "+x"(qv.raw));
#endif
          HWY_UNROLL_ALL for (int j = 0; j < kTok; ++j) acc[i][j] = hn::MulAdd(qv, x[j], acc[i][j]);
        }
      }
#if HWY_TARGET == HWY_AVX2
      if (dv == d) {  // kTok == 2: one transpose-reduction for the whole block
        const __m256 v[8] = {acc[0][0].raw, acc[0][1].raw, acc[1][0].raw, acc[1][1].raw,
                             acc[2][0].raw, acc[2][1].raw, acc[3][0].raw, acc[3][1].raw};
        __m256 sums = transpose_reduce8(v);  // lane 2i + j: row i, token j
        if (k.scale) {
          const float c0 = k.scale_at(t), c1 = k.scale_at(t + 1);
          sums = _mm256_mul_ps(sums, _mm256_setr_ps(c0, c1, c0, c1, c0, c1, c0, c1));
        }
        alignas(32) float sum8[8];
        _mm256_store_ps(sum8, sums);
        for (int i = 0; i < 4; ++i) std::memcpy(s + (r + i) * ls + t, sum8 + 2 * i, 2 * sizeof(float));
        continue;
      }
#endif
#if HWY_TARGET <= HWY_AVX3
      if (dv == d) {  // kTok == 4: one transpose-reduction for the whole block
        __m512 sums = transpose_reduce16(acc);  // lane 4i + j: row i, token j
        if (k.scale) {
          const __m128 c = _mm_setr_ps(k.scale_at(t), k.scale_at(t + 1), k.scale_at(t + 2), k.scale_at(t + 3));
          sums = _mm512_mul_ps(sums, _mm512_broadcast_f32x4(c));
        }
        _mm_storeu_ps(s + (r + 0) * ls + t, _mm512_extractf32x4_ps(sums, 0));
        _mm_storeu_ps(s + (r + 1) * ls + t, _mm512_extractf32x4_ps(sums, 1));
        _mm_storeu_ps(s + (r + 2) * ls + t, _mm512_extractf32x4_ps(sums, 2));
        _mm_storeu_ps(s + (r + 3) * ls + t, _mm512_extractf32x4_ps(sums, 3));
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
      hn::Store(reduce4(df, a0, a1, a2, a3), d4, out);
      for (int64_t j = 0; j < nt; ++j) s[r * ls + t + j] = k.scale_at(t + j) * (out[j] + tail(qr, kt[j]));
    }
  }
}

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

struct Run {  // tokens [start, start + count) of segment `seg`
  int64_t seg, start, count;
};
struct Item {  // one sequence's runs [run_begin, run_end)
  int64_t b, run_begin, run_end;
};

struct Plan {
  std::vector<std::vector<KVSegment>> segs;  // per sequence
  std::vector<int64_t> held;                 // per sequence
  std::vector<Run> runs;
  std::vector<Item> items;
};

Plan make_plan(const DecodeArgs& a) {
  Plan p;
  for (size_t b = 0; b < a.seqs.size(); ++b) {
    p.segs.push_back(a.cache->segments(a.seqs[b], a.layer));
    p.held.push_back(a.cache->cached(a.seqs[b], a.layer));
    int64_t in_item = 0;
    for (size_t s = 0; s < p.segs.back().size(); ++s)
      for (int64_t t = 0; t < p.segs.back()[s].n;) {
        if (in_item == 0 || in_item == DecodeTiles::kChunk) {
          p.items.push_back({int64_t(b), int64_t(p.runs.size()), int64_t(p.runs.size())});
          in_item = 0;
        }
        const int64_t count = std::min(p.segs.back()[s].n - t, DecodeTiles::kChunk - in_item);
        p.runs.push_back({int64_t(s), t, count});
        p.items.back().run_end = int64_t(p.runs.size());
        in_item += count;
        t += count;
      }
  }
  return p;
}

class Decoder {
 public:
  Decoder(const DecodeOptions& o, const DecodeArgs& a, const Plan& p)
      : o_(o), a_(a), p_(p), cfg_(a.cache->config()), n_(a.q.shape[0] / int64_t(a.seqs.size())),
        h_(a.q.shape[1]), hkv_(cfg_.kv_heads), g_(h_ / hkv_), d_(cfg_.head_dim),
        rows_(n_ * g_), elem_(int64_t(dtype_size(cfg_.dtype))),
        bt_(std::clamp<int64_t>(DecodeTiles::kStageBytes / (hkv_ * d_ * elem_), 4,
                                DecodeTiles::kBlockTokens)),
        sub_(std::clamp<int64_t>(DecodeTiles::sub_block_bytes() / (hkv_ * d_ * elem_), 4, bt_)),
        ahead_(std::max<int64_t>(DecodeTiles::kPrefetchBytes / (hkv_ * d_ * elem_), sub_)),
        scale_(effective_scale(o.attention, d_)) {
    if (o.rope_theta > 0) {
      const int64_t most = *std::max_element(p.held.begin(), p.held.end());
      rope_ = rope_table_for(d_, o.rope_theta, most);
    }
  }

  int64_t scratch_bytes() const {
    const int64_t rope_stage = rope_ ? bt_ * hkv_ * d_ : 0;
    return int64_t(sizeof(float)) * (hkv_ * rows_ * d_ + hkv_ * rows_ * bt_ + rope_stage) + 3 * 64;
  }
  // Floats of one item's partial result: m and l for each row ([Hkv][n·G]), then O ([Hkv][n·G][D]).
  int64_t partial_floats() const { return hkv_ * rows_ * (d_ + 2); }

  // Runs one item, leaving its unnormalised (m, l, O) per row in `partial`.
  void run(const Item& it, Workspace& ws, float* partial) const {
    if (rope_) return run_as<LoadF32>(it, ws, partial);  // keys are rotated into a float32 stage
    switch (cfg_.dtype) {
      case DType::f16: return run_as<LoadF16>(it, ws, partial);
      case DType::bf16: return run_as<LoadBF16>(it, ws, partial);
      case DType::i8: return run_as<LoadI8>(it, ws, partial);
      default: return run_as<LoadF32>(it, ws, partial);
    }
  }

  // Merges the partials of items [first, last) of sequence b into out and lse.
  void merge(int64_t b, const float* partials, int64_t first, int64_t last) const {
    const int64_t pf = partial_floats();
    std::vector<double> acc(static_cast<size_t>(d_));
    for (int64_t hk = 0; hk < hkv_; ++hk)
      for (int64_t r = 0; r < rows_; ++r) {
        const int64_t row = hk * rows_ + r, i = r / g_, hq = hk * g_ + r % g_;
        double mx = a_.sink_logits.empty() ? -INFINITY : double(a_.sink_logits[size_t(hq)]);
        for (int64_t it = first; it < last; ++it) mx = std::max(mx, double(partials[it * pf + row]));
        double sum = a_.sink_logits.empty() ? 0.0 : std::exp(a_.sink_logits[size_t(hq)] - mx);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t it = first; it < last; ++it) {
          const float* p = partials + it * pf;
          if (p[row] == kNegInf) continue;
          const double w = std::exp(double(p[row]) - mx);
          sum += w * p[hkv_ * rows_ + row];
          const float* oi = p + 2 * hkv_ * rows_ + row * d_;
          for (int64_t e = 0; e < d_; ++e) acc[size_t(e)] += w * oi[e];
        }
        float* out = a_.out.ptr(b * n_ + i, hq);
        // No visible key and no sink: zeros and lse = -inf, never NaN.
        for (int64_t e = 0; e < d_; ++e) out[e] = sum > 0 ? float(acc[size_t(e)] / sum) : 0.0f;
        if (!a_.lse.empty()) a_.lse(hq, b * n_ + i) = sum > 0 ? float(mx + std::log(sum)) : kNegInf;
      }
  }

 private:
  KeyRange vis(int64_t i, int64_t held) const { return visible_keys(o_.attention, i, n_, held); }

  template <class L>
  void run_as(const Item& it, Workspace& ws, float* partial) const {
    float* m = partial;
    float* l = partial + hkv_ * rows_;
    float* o = partial + 2 * hkv_ * rows_;
    float* q = ws.alloc<float>(size_t(hkv_ * rows_ * d_));   // [Hkv][n·G][D], scaled (+ rope)
    float* s = ws.alloc<float>(size_t(hkv_ * rows_ * bt_));  // [Hkv][n·G][bt] scores → P
    float* rotated = rope_ ? ws.alloc<float>(size_t(bt_ * hkv_ * d_)) : nullptr;  // [bt][Hkv][D]
    const int64_t held = p_.held[size_t(it.b)];
    load_queries(it.b, held, q);
    std::fill(m, m + hkv_ * rows_, kNegInf);
    std::fill(l, l + hkv_ * rows_, 0.0f);
    std::fill(o, o + hkv_ * rows_ * d_, 0.0f);
    const KeyRange first = vis(0, held), last = vis(n_ - 1, held);
    const int64_t token_bytes = hkv_ * d_ * elem_;
    for (int64_t ri = it.run_begin; ri < it.run_end; ++ri) {
      const Run& run = p_.runs[size_t(ri)];
      const KVSegment& sg = p_.segs[size_t(it.b)][size_t(run.seg)];
      for (int64_t t0 = run.start; t0 < run.start + run.count; t0 += bt_) {
        const int64_t bt = std::min(bt_, run.start + run.count - t0);
        const int64_t pos0 = sg.logical_start + t0;  // cache position of the block's first token
        if (last.hi <= pos0 || first.lo >= pos0 + bt) continue;  // no query sees this block
        const bool masked = !(last.lo <= pos0 && first.hi >= pos0 + bt);
        const std::byte* kb = sg.k + t0 * token_bytes;
        const std::byte* vb = sg.v + t0 * token_bytes;
        // Prefetching: the kernels request each row they read again `ahead` tokens later (the
        // same head's row, one or two sub-blocks on), a few lines per token step, so the fill
        // buffers stay busy while the core computes; the first `ahead` tokens of a run are
        // requested here. (Bursts of thousands of prefetches between kernel calls stall the
        // core once the fill buffers are full: compute and memory then take turns.)
        if (t0 == run.start) {
          const int64_t first = std::min(ahead_, run.count) * token_bytes;
          prefetch_range(kb, first);
          prefetch_range(vb, first);
        }
        const std::byte* k_end = sg.k + (run.start + run.count) * token_bytes;
        const std::byte* v_end = sg.v + (run.start + run.count) * token_bytes;
        const int64_t pf = ahead_ * token_bytes;
        Rows k{kb, token_bytes, sg.k_scale ? sg.k_scale + t0 * hkv_ : nullptr, hkv_, pf, k_end};
        if (rotated) {  // the stage is in cache already: rotate_keys prefetches the stored rows
          rotate_keys(k, bt, pos0, rotated);
          k = {reinterpret_cast<const std::byte*>(rotated), hkv_ * d_ * 4, nullptr, 0};
        }
        const int64_t k_head = rotated ? d_ * 4 : d_ * elem_;
        // Sub-blocks of `sub_` tokens, all heads each: the cache is consumed close to address
        // order, so the hardware prefetchers see forward streams.
        for (int64_t u0 = 0; u0 < bt; u0 += sub_) {
          const int64_t u = std::min(sub_, bt - u0);
          for (int64_t hk = 0; hk < hkv_; ++hk) {
            const Rows kh{k.base + u0 * k.stride + hk * k_head, k.stride,
                          k.scale ? k.scale + u0 * k.scale_stride + hk : nullptr, k.scale_stride,
                          k.pf, k.pf_end};
            block_scores<L>(q + hk * rows_ * d_, rows_, kh, u, d_, s + hk * rows_ * bt_ + u0, bt_);
          }
        }
        for (int64_t hk = 0; hk < hkv_; ++hk)
          online_softmax(s + hk * rows_ * bt_, bt, pos0, masked, it.b, hk, held, m + hk * rows_,
                         l + hk * rows_, o + hk * rows_ * d_);
        for (int64_t u0 = 0; u0 < bt; u0 += sub_) {
          const int64_t u = std::min(sub_, bt - u0);
          for (int64_t hk = 0; hk < hkv_; ++hk) {
            const Rows vh{vb + u0 * token_bytes + hk * d_ * elem_, token_bytes,
                          sg.v_scale ? sg.v_scale + (t0 + u0) * hkv_ + hk : nullptr, hkv_,
                          pf, v_end};
            const float* p = s + hk * rows_ * bt_ + u0;
            float* oh = o + hk * rows_ * d_;
            if constexpr (std::is_same_v<L, LoadF32>) {
              if (rotated) {  // the rope path: K was rotated into float32, V keeps its dtype
                accumulate_stored(p, vh, u, oh);
                continue;
              }
            }
            block_accumulate<L>(p, bt_, rows_, vh, u, d_, oh);
          }
        }
      }
    }
  }

  // P·V for the rope path, whose K stage is float32 but whose V keeps the storage dtype.
  void accumulate_stored(const float* p, const Rows& v, int64_t bt, float* o) const {
    switch (cfg_.dtype) {
      case DType::f16: return block_accumulate<LoadF16>(p, bt_, rows_, v, bt, d_, o);
      case DType::bf16: return block_accumulate<LoadBF16>(p, bt_, rows_, v, bt, d_, o);
      case DType::i8: return block_accumulate<LoadI8>(p, bt_, rows_, v, bt, d_, o);
      default: return block_accumulate<LoadF32>(p, bt_, rows_, v, bt, d_, o);
    }
  }

  // K rows of a block → float32 [bt][Hkv][D], rotated by their cache positions.
  void rotate_keys(const Rows& k, int64_t bt, int64_t pos0, float* dst) const {
    for (int64_t t = 0; t < bt; ++t) {
      prefetch_ahead(k, k.base + t * k.stride, k.stride);
      kv_load_rows(k.base + t * k.stride, cfg_.dtype, k.scale ? k.scale + t * hkv_ : nullptr, hkv_,
                   d_, dst + t * hkv_ * d_, d_);
      for (int64_t hk = 0; hk < hkv_; ++hk)
        rope_rotate(dst + (t * hkv_ + hk) * d_, d_, rope_->cos(pos0 + t), rope_->sin(pos0 + t));
    }
  }

  void load_queries(int64_t b, int64_t held, float* q) const {
    for (int64_t i = 0; i < n_; ++i)
      for (int64_t hq = 0; hq < h_; ++hq) {
        float* dst = q + ((hq / g_) * rows_ + i * g_ + hq % g_) * d_;
        const float* src = a_.q.ptr(b * n_ + i, hq);
        for (int64_t e = 0; e < d_; ++e) dst[e] = src[e];
        if (rope_) {
          const int64_t pos = held - n_ + i;
          rope_rotate(dst, d_, rope_->cos(pos), rope_->sin(pos));
        }
        for (int64_t e = 0; e < d_; ++e) dst[e] *= scale_;
      }
  }

  // Online-softmax update of KV head hk's rows of sequence b with scores s [n·G, bt] (row stride
  // bt_) of the keys at cache positions [pos0, pos0 + bt); leaves P in s.
  void online_softmax(float* s, int64_t bt, int64_t pos0, bool masked, int64_t b, int64_t hk,
                      int64_t held, float* m, float* l, float* o) const {
    for (int64_t r = 0; r < rows_; ++r) {
      const int64_t i = r / g_;
      const flash::RowBias bias{alibi_slope(b, hk * g_ + r % g_), i + held - n_};
      flash::online_softmax_row(s + r * bt_, bt, o_.attention.softcap, bias, masked, pos0,
                                vis(i, held), m[r], l[r], o + r * d_, d_);
    }
  }

  // ALiBi slope of query head hq in sequence b (slopes [H] or [B, H]); 0 without ALiBi.
  float alibi_slope(int64_t b, int64_t hq) const {
    const auto& sl = a_.alibi_slopes;
    if (sl.empty()) return 0.0f;
    return sl[size_t(int64_t(sl.size()) == h_ ? hq : b * h_ + hq)];
  }

  const DecodeOptions& o_;
  const DecodeArgs& a_;
  const Plan& p_;
  const KVCacheConfig& cfg_;
  int64_t n_, h_, hkv_, g_, d_, rows_, elem_, bt_, sub_;
  int64_t ahead_;  // prefetch distance in tokens
  float scale_;
  std::shared_ptr<const RopeTable> rope_;
};

}  // namespace

int64_t DecodeTiles::sub_block_bytes() {
  static const int64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return std::clamp<int64_t>(l2 > 0 ? l2 / 32 : 0, 16 * 1024, 32 * 1024);
  }();
  return bytes;
}

void decode_attention(const DecodeOptions& o, const DecodeArgs& a) {
  validate(o, a);
  check(a.out.inner_contiguous(), "out: last dimension must be contiguous");
  check(a.q.inner_contiguous(), "q: last dimension must be contiguous");
  const Plan plan = make_plan(a);
  const Decoder dec(o, a, plan);
  const int64_t items = int64_t(plan.items.size()), pf = dec.partial_floats();
  std::vector<float> partials(static_cast<size_t>(items * pf));
  auto& spaces = thread_workspaces(size_t(dec.scratch_bytes()));
  parallel_for(items, [&](int64_t idx) {
    Workspace& ws = spaces[size_t(thread_index())];
    ws.reset();
    dec.run(plan.items[size_t(idx)], ws, partials.data() + idx * pf);
  });
  // Items of a sequence are consecutive; merge each sequence's range.
  const int64_t nseq = int64_t(a.seqs.size());
  std::vector<int64_t> begin(static_cast<size_t>(nseq + 1), items);
  for (int64_t it = items - 1; it >= 0; --it) begin[size_t(plan.items[size_t(it)].b)] = it;
  for (int64_t b = nseq - 1; b >= 0; --b) begin[size_t(b)] = std::min(begin[size_t(b)], begin[size_t(b + 1)]);
  parallel_for(nseq, [&](int64_t b) { dec.merge(b, partials.data(), begin[size_t(b)], begin[size_t(b + 1)]); });
}

}  // namespace attnkit
