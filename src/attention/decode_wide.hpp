#pragma once
// Decode kernels for wide query groups: when a KV head's n·G query rows fill whole vectors (MQA:
// 32 rows per KV head), the rows are the vector dimension, so neither product needs a horizontal
// sum and K/V are converted to float32 once per block for all rows (decode_wide.cpp). Internal
// header.
#include <cstdint>

namespace attnkit::decode {

// Whether the wide kernels take `rows` query rows per KV head of head dim d (rows a multiple of
// the vector width and at least two vectors; d a multiple of the value kernel's block).
bool wide_supported(int64_t rows, int64_t d);

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

// o[r, :] += Σ_t pt[t·ldp + r]·v[t·ldv + :] for r < rows, t < bt: pt [bt, rows] probabilities,
// v [bt, d] float32 rows at stride ldv, o [rows, d].
void wide_values(const float* pt, int64_t ldp, int64_t rows, const float* v, int64_t ldv,
                 int64_t bt, int64_t d, float* o);

}  // namespace attnkit::decode
