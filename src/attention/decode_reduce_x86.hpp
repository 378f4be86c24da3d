#pragma once
// Transposing horizontal sums for the decode score kernel, in raw x86 intrinsics: a block of
// dot-product accumulators (rows × tokens, one vector each) becomes one vector of their sums, in
// far fewer shuffles than one horizontal sum per accumulator. Highway has no multi-vector
// transpose-add, so these take the kernel's Highway vectors generically (V::raw is the native
// register) and keep the intrinsics out of the Highway code. Internal header.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace attnkit::decode_x86 {

#if defined(__AVX512F__)
// Sixteen accumulators (16 lanes each) → one vector, lane 4i + j = Σ acc[i][j]: two rounds of
// 256/128-bit block shuffles, then two of in-block unpacks (45 instructions, against 88 for four
// 4-way horizontal sums).
template <class V>
inline __m512 transpose_reduce16(const V (&acc)[4][4]) {
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

// s[i·ls + j] = c_j · Σ acc[i][j] for 4 rows i × 4 tokens j (AVX-512 accumulators); c = null
// means c_j = 1.
template <class V>
inline void store_sums_4x4(const V (&acc)[4][4], const float* c, float* s, int64_t ls) {
  __m512 sums = transpose_reduce16(acc);  // lane 4i + j: row i, token j
  if (c) sums = _mm512_mul_ps(sums, _mm512_broadcast_f32x4(_mm_loadu_ps(c)));
  _mm_storeu_ps(s + 0 * ls, _mm512_extractf32x4_ps(sums, 0));
  _mm_storeu_ps(s + 1 * ls, _mm512_extractf32x4_ps(sums, 1));
  _mm_storeu_ps(s + 2 * ls, _mm512_extractf32x4_ps(sums, 2));
  _mm_storeu_ps(s + 3 * ls, _mm512_extractf32x4_ps(sums, 3));
}
#endif

#if defined(__AVX2__)
// Eight accumulators (8 lanes each) → one vector, lane k = Σ v[k]: in-block unpacks of float
// pairs, then of 64-bit pairs, then the two 128-bit halves added (21 instructions, against 34
// for two 4-way horizontal sums).
inline __m256 transpose_reduce8(const __m256 (&v)[8]) {
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

// s[i·ls + j] = c_j · Σ acc[i][j] for 4 rows i × the first 2 token columns j of acc (AVX2
// accumulators, N >= 2); c = null means c_j = 1.
template <class V, int N>
inline void store_sums_4x2(const V (&acc)[4][N], const float* c, float* s, int64_t ls) {
  static_assert(N >= 2);
  const __m256 v[8] = {acc[0][0].raw, acc[0][1].raw, acc[1][0].raw, acc[1][1].raw,
                       acc[2][0].raw, acc[2][1].raw, acc[3][0].raw, acc[3][1].raw};
  __m256 sums = transpose_reduce8(v);  // lane 2i + j: row i, token j
  if (c) sums = _mm256_mul_ps(sums, _mm256_setr_ps(c[0], c[1], c[0], c[1], c[0], c[1], c[0], c[1]));
  alignas(32) float sum8[8];
  _mm256_store_ps(sum8, sums);
  for (int i = 0; i < 4; ++i) std::memcpy(s + i * ls, sum8 + 2 * i, 2 * sizeof(float));
}
#endif

// Keeps v in a register: without it the compiler folds v's load into each FMA as a memory
// operand, and loads (not FMAs) then bound the loop (the row score kernel on AVX2, the wide value
// kernel's blocks that read V from the float32 stage).
template <class V>
inline void pin_register(V& v) {
  asm("" : "+x"(v.raw));
}

}  // namespace attnkit::decode_x86
