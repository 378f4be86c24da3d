#pragma once
// The two register-blocked kernels of split-KV decode, one per stored dtype: scores S = Q·Kᵀ
// (decode_scores.cpp) and the value update O += P·V (decode_values.cpp). Both read stored K/V rows
// and convert them in registers. Internal header.
#include <cstdint>

#include "attnkit/core/dtype.hpp"
#include "decode_rows.hpp"

namespace attnkit::decode {

// s[r·ls + t] = q_r·k_t · scale_t for r < rows, t < bt: q [rows, d] float32, k `bt` stored rows
// (scale_t = k's int8 scale of token t, else 1); prefetches k.pf bytes ahead while reading.
using ScoreKernel = void (*)(const float* q, int64_t rows, const Rows& k, int64_t bt, int64_t d,
                             float* s, int64_t ls);
// o[r, :] += Σ_t p[r·lp + t]·scale_t·v_t for r < rows, t < bt: v `bt` stored rows, o [rows, d]
// float32; prefetches v.pf bytes ahead while reading.
using ValueKernel = void (*)(const float* p, int64_t lp, int64_t rows, const Rows& v, int64_t bt,
                             int64_t d, float* o);

// The score kernel for K rows stored as `stored` (f32, f16, bf16 or int8).
ScoreKernel score_kernel(DType stored);
// The value kernel for V rows stored as `stored` (f32, f16, bf16 or int8).
ValueKernel value_kernel(DType stored);

}  // namespace attnkit::decode
