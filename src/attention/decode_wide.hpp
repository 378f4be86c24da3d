#pragma once
// Decode kernels for wide query groups: when a KV head's n·G query rows fill whole vectors (MQA:
// 32 rows per KV head), the rows are the vector dimension, so neither product needs a horizontal
// sum and each block of K/V is converted to float32 once, into an L1-sized stage, for all rows
// (decode_wide.cpp). Internal header.
#include <cstdint>

#include "attnkit/core/dtype.hpp"
#include "decode_rows.hpp"

namespace attnkit::decode {

// Tokens per wide block: K and V of one KV head for a block (D 128: 16 KiB each as float32) stay
// in L1 next to the transposed queries.
inline constexpr int64_t kWideTokens = 32;

// Whether the wide kernels take `rows` query rows per KV head of head dim d (rows a multiple of
// the vector width and at least two vectors; d a multiple of the value kernel's block).
bool wide_supported(int64_t rows, int64_t d);

// dst[t·d + e] = element e of stored row t (times its int8 scale) for t < bt, e < d: one KV
// head's rows → float32 [bt, d]; prefetches r.pf bytes ahead while reading.
using WideStage = void (*)(const Rows& r, int64_t bt, int64_t d, float* dst);
// The stage kernel for rows stored as `stored` (f32, f16, bf16 or int8).
WideStage wide_stage(DType stored);

// Scores and online softmax of a block in which every query row sees every key, in one pass:
// pt[t·rows + r] = exp(Σ_e qt[e·rows + r]·k_t[e] - m[r]) for t < bt, r < rows (qt [d, rows]
// float32, queries transposed; k `bt` stored rows, converted kTok rows at a time into `tile`
// [kTok, d] float32 unless stored as float32), l[r] += Σ_t pt[t·rows + r]. The reference max m[r]
// is raised (and l[r], o[r, :] (o [rows, d]) and the block's earlier pt rescaled) only when a
// score exceeds it by more than 8, so pt ≤ e^8. Requests the bt rows k.pf bytes ahead of k, then
// those v_ahead->pf bytes ahead of *v_ahead (if given), spread over its FMA loop.
using WideScoresSoftmax = void (*)(const float* qt, int64_t rows, const Rows& k, int64_t bt,
                                   int64_t d, float* pt, float* m, float* l, float* o, float* tile,
                                   const Rows* v_ahead);
// The fused score kernel for K rows stored as `stored` (f32, f16, bf16 or int8).
WideScoresSoftmax wide_scores_softmax(DType stored);

// st[t·ldst + r] = Σ_e qt[e·ldq + r]·k[t·ldk + e] for t < bt, r < rows: qt [d, rows] float32
// (queries transposed), k [bt, d] float32 rows at stride ldk.
void wide_scores(const float* qt, int64_t ldq, int64_t rows, const float* k, int64_t ldk,
                 int64_t bt, int64_t d, float* st, int64_t ldst);

// Online-softmax step over the columns of st [bt, rows] (row stride ldst; st[t·ldst + r] is the
// score of key t for query row r, -inf when masked): per row r the running max m[r] grows, st
// becomes exp(st - m) (0 below e^-64 of the max and while a row has seen no visible key), the
// running sum l[r] gains Σ_t st, and when m[r] grows l[r] and o[r, :] (o [rows, d]) are rescaled.
void wide_online_softmax(float* st, int64_t ldst, int64_t rows, int64_t bt, float* m, float* l,
                         float* o, int64_t d);

// o[r, :] += Σ_t pt[t·rows + r]·v_t for r < rows, t < bt: pt [bt, rows] probabilities, v `bt`
// stored rows (times their int8 scales), o [rows, d]. Each V vector is converted once, by the
// first register block of rows, into `stage` [bt, d] float32 for the others (float32 rows are
// read in place); prefetches v.pf bytes ahead while reading.
using WideValues = void (*)(const float* pt, int64_t rows, const Rows& v, int64_t bt, int64_t d,
                            float* o, float* stage);
// The value kernel for V rows stored as `stored` (f32, f16, bf16 or int8).
WideValues wide_values_stored(DType stored);

}  // namespace attnkit::decode
