#pragma once
// Weight-gradient GEMM: C[m, n] = Aᵀ·B + beta·C with A stored [k, m] and B [k, n] (row-major), the
// shape of a linear layer's d_W += d_yᵀ·x over k tokens. On oneDNN's matmul (its brgemm kernels
// take the transposed A in place) where it applies, one thread per call, so a caller that splits C
// into fixed tiles gets results independent of the thread count (gemm_packed.cpp).
// PyTorch: C = A.T @ B + beta * C.
#include <cstdint>

#include "attnkit/core/scoped_setting.hpp"

namespace attnkit {

// True when sgemm_tn_onednn serves a product of [m, n] over k: a oneDNN build, the path switched on
// (wgrad_gemm_enabled) and every side at least 16. A function of the shape and the switch only.
bool wgrad_gemm_applies(int64_t m, int64_t n, int64_t k);
// C[m, n] = Aᵀ·B + beta·C (beta 0 or 1; A [k, m] with row stride lda, B [k, n] with ldb, C with
// ldc), on the calling thread only. Throws attnkit::Error when oneDNN is unavailable or beta is
// neither 0 nor 1.
void sgemm_tn_onednn(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                     int64_t ldb, float beta, float* c, int64_t ldc);

// Whether the oneDNN weight-gradient path is on (default on; ATTNKIT_WGRAD_GEMM=0 in the
// environment turns it off for the process: the products then run on OpenBLAS). Process-wide.
bool wgrad_gemm_enabled();
// Switches the oneDNN weight-gradient path on or off for the whole process.
void set_wgrad_gemm_enabled(bool on);
// Turns the path on or off for the scope's lifetime (tests, benchmarks).
using WgradGemmScope = ScopedSetting<bool, wgrad_gemm_enabled, set_wgrad_gemm_enabled>;

}  // namespace attnkit
