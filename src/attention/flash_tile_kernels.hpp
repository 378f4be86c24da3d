#pragma once
// Register-blocked tile products of the flash forward and backward on packed operands (no BLAS).
// Forward: the scores S = Q·Kᵀ of a query tile against a key range, and O += P·V; K and V of a
// (sequence, KV head) are packed once and shared by every query tile, the query tile is
// panel-packed once per tile. Backward: S = Q·Kᵀ and dP = dO·Vᵀ with Q and dO panel-packed,
// dV += Pᵀ·dO and dK += dSᵀ·Q (transposed A read in place from the P and dS blocks), dQ += dS·K.
// Layouts (MR = kRowBlock rows, NK = kKeyPanel keys, NV = kValuePanel columns of D):
//   packed Kᵀ [ceil(S/NK), D, NK]      K[j, e] at ((j / NK)·D + e)·NK + j % NK, zero-padded keys
//   packed V  [ceil(D/NV), S, NV]      V[j, e] at ((e / NV)·S + j)·NV + e % NV, zero-padded columns
//   panel-packed A [ceil(D/NV), R, NV]  A[r, e] at (e / NV)·stride + r·NV + e % NV (stride >= R·NV:
//                                        the "packed V" layout of R rows, with a free panel stride)
//   scores/probabilities [rows, kScoreStride], output O [rows, padded_dim(D)], row-major.
// The micro-kernels hold MR × 2 vectors of accumulators: AVX-512 12 × 32 floats (24 of its 32
// registers), AVX2 6 × 16 floats (12 of 16); each loaded vector of K (or V) serves MR rows and
// each broadcast element of Q (or P) two vectors. Packing a row (pack_panel_row, pack_values) is
// a contiguous copy; only Kᵀ is a transpose.
#include <cstdint>

#include "attnkit/attention/flash_attention.hpp"

namespace attnkit::flash {

#if defined(__AVX512F__)
inline constexpr int64_t kLanes = 16;
inline constexpr int64_t kRowBlock = 12;
#elif defined(__AVX2__)
inline constexpr int64_t kLanes = 8;
inline constexpr int64_t kRowBlock = 6;
#else
inline constexpr int64_t kLanes = 4;
inline constexpr int64_t kRowBlock = 6;
#endif
inline constexpr int64_t kKeyPanel = 2 * kLanes;    // keys per packed Kᵀ panel (NK)
inline constexpr int64_t kValuePanel = 2 * kLanes;  // columns of D per packed V panel (NV)
// Row stride of the score buffer: a key tile plus one cache line. A stride of kKeyTile floats
// (2 KiB) would put the MR rows a micro-kernel reads into two L1 sets.
inline constexpr int64_t kScoreStride = FlashTiles::kKeyTile + 16;
// Query positions per masked sub-block on the diagonal: a multiple of MR rows for any G, so
// every sub-block starts on a row block. Each sub-block computes the keys up to its last row, so
// half a sub-block per row is wasted: 12 positions ran causal forwards 1-3 % faster than 24.
inline constexpr int64_t kPackedDiagonalBlock = 12;
static_assert(FlashTiles::kKeyTile % kKeyPanel == 0 && kPackedDiagonalBlock % kRowBlock == 0);

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
// Columns of O (and of the packed V) for head dimension d: d rounded up to NV.
inline int64_t padded_dim(int64_t d) { return round_up(d, kValuePanel); }
// Floats of a packed Kᵀ and a packed V of s keys.
inline int64_t packed_keys_size(int64_t s, int64_t d) { return round_up(s, kKeyPanel) * d; }
inline int64_t packed_values_size(int64_t s, int64_t d) { return s * padded_dim(d); }

// Packs K rows [s, D] (row j at k + j·ld) as Kᵀ panels (layout above) into kp; returns whether
// every value was finite (the packing pass doubles as the input check).
bool pack_keys(const float* k, int64_t ld, int64_t s, int64_t d, float* kp);
// Packs V rows [s, D] (row j at v + j·ld) as column panels (layout above) into vp; returns
// whether every value was finite.
bool pack_values(const float* v, int64_t ld, int64_t s, int64_t d, float* vp);
// o[r, e] += Σ_j p[r, j]·V[j0 + j, e] for r < rows, j < n, e < padded_dim(d): p has row stride
// kScoreStride, o row stride padded_dim(d); vp is the packed V of all s keys of the head. Rows of
// p from `rows` to the end of the last row block are read and must be finite (their products are
// dropped); rows of o past `rows` are untouched.
void tile_accumulate(const float* p, int64_t rows, const float* vp, int64_t s, int64_t j0,
                     int64_t n, int64_t d, float* o);

// Row stride of the backward's P and dS blocks: a backward key tile plus one cache line.
inline constexpr int64_t kBwdScoreStride = FlashTiles::kBwdKeyTile + 16;
static_assert(kBwdScoreStride % kLanes == 0);

// Writes factor·x[0:d] as one row of a panel-packed matrix: x[e] to dst[(e / NV)·panel_stride +
// e % NV], columns zero-padded to padded_dim(d); returns whether x[0:d] was finite.
bool pack_panel_row(const float* x, float factor, int64_t d, float* dst, int64_t panel_stride);
// Zeroes rows [r0, r1) of the panel-packed matrix at ap (panel stride panel_stride, D = d): the
// pad rows of a last row block, which the score kernels read.
void zero_panel_rows(float* ap, int64_t panel_stride, int64_t r0, int64_t r1, int64_t d);

// s[r, j] = Σ_e A[r, e]·K[j, e] for rows [0, ceil(rows/MR)·MR) of the panel-packed A at ap (panel
// stride a_stride) and keys [0, ceil(n/NK)·NK) of the Kᵀ panels at kp; s has row stride ls (a
// multiple of kLanes). Columns past n and rows past `rows` are written and must be ignored.
void tile_scores_panels(const float* ap, int64_t a_stride, int64_t rows, const float* kp,
                        int64_t n, int64_t d, float* s, int64_t ls);

// c[j, e] += Σ_{r<k} p[r, j]·B[r, e] for j < m, e < padded_dim(d): p has row stride
// kBwdScoreStride and is read up to column ceil(m/MR)·MR; B is panel-packed (panel stride
// b_stride, bp at its row 0); c has row stride ldc >= padded_dim(d), rows past m untouched.
void tile_accumulate_transposed(const float* p, int64_t m, int64_t k, const float* bp,
                                int64_t b_stride, int64_t d, float* c, int64_t ldc);

// c[r, e] += Σ_{j<n} p[r, j]·B[j, e] for r < rows, e < padded_dim(d): p has row stride
// kBwdScoreStride and is read up to row ceil(rows/MR)·MR; B is panel-packed (panel stride
// b_stride); c has row stride ldc >= padded_dim(d), rows past `rows` untouched.
void tile_accumulate_rows(const float* p, int64_t rows, const float* bp, int64_t b_stride,
                          int64_t n, int64_t d, float* c, int64_t ldc);

// x[j] ← exp(x[j] - m) for j < n, exactly 0 where x[j] - m < -64 (as exp_sub_sum; -inf gives
// 0); returns Σ x[j]. A degree-6 polynomial for 2^f after splitting off the integer power
// (relative error below 2.5e-7, about 2 ulp; exp_sub_sum's is about 1 ulp) at fewer
// instructions than exp_sub_sum: the exponentials are 10 % of the forward's time.
float tile_exp_sum(float* x, int64_t n, float m);

}  // namespace attnkit::flash
