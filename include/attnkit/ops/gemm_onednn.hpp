#pragma once
// sgemm's one-thread products on oneDNN's matmul: C[m, n] = op(A)·op(B) + beta·C with any
// transposes given by strides, one thread per call. sgemm (ops/gemm.hpp) sends its one-thread
// calls here where sgemm_onednn_applies: the calls made inside attnkit's own parallel regions or
// under BlasThreadsScope(1), i.e. the fixed tiles and chunks of the flash, linear, convolution and
// cross-entropy kernels. A call's result depends on its shape only, so a caller that splits C into
// fixed tiles gets results independent of the thread count (docs/performance.md has the
// measurements behind the rule of sgemm_onednn_applies).
// PyTorch: C = op(A) @ op(B) + beta * C.
#include <cstdint>
#include <string_view>

#include "attnkit/core/scoped_setting.hpp"

namespace attnkit {

// True when sgemm_onednn serves this product: a oneDNN build, sgemm_path() not kOpenBlas, alpha 1,
// beta 0 or 1, m·n·k of at least 32³ (below that a call's fixed cost outweighs the kernel), and,
// under kAuto, either Aᵀ·B with k >= m, n (a weight gradient over tokens: oneDNN
// takes the transposed A in place) or any product of at least 2²³ when oneDNN runs AVX-512 kernels
// and OpenBLAS does not (an OPENBLAS_CORETYPE=Haswell environment on an AVX-512 CPU). A function of
// the arguments, sgemm_path() and the process's kernel choices only, never of the thread count.
bool sgemm_onednn_applies(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          float beta);
// C[m, n] = op(A)·op(B) + beta·C (beta 0 or 1; row-major A stored [m, k], or [k, m] when trans_a,
// with row stride lda; B [k, n], or [n, k] when trans_b, with ldb; C with ldc), on the calling
// thread only. Throws attnkit::Error when oneDNN is unavailable or beta is neither 0 nor 1.
void sgemm_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// True when sgemm_batched sends its batch to sgemm_batched_onednn: a oneDNN build, sgemm_path() not
// kOpenBlas, beta 0 or 1, batch·m·n·k of at least 32³. Any transposes and any OpenBLAS kernels: one
// batched call measured at least as fast as the calls one by one.
bool sgemm_batched_applies(int64_t batch, int64_t m, int64_t n, int64_t k, float beta);
// C_e = op(A_e)·op(B_e) + beta·C_e for e < batch, A_e at a + e·stride_a, B_e at b + e·stride_b,
// C_e at c + e·stride_c, each laid out as in sgemm_onednn: one batched matmul on the calling thread.
// Throws attnkit::Error when oneDNN is unavailable or beta is neither 0 nor 1.
void sgemm_batched_onednn(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                          const float* a, int64_t lda, int64_t stride_a, const float* b,
                          int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                          int64_t stride_c);

// Which library sgemm's one-thread calls and sgemm_batched use: kOpenBlas (all on OpenBLAS), kAuto
// (the default: oneDNN where it measured faster, the rules of sgemm_onednn_applies and
// sgemm_batched_applies), kOneDnn (every product oneDNN's path takes: alpha 1, beta 0 or 1, at
// least 32³ multiply-adds; for tests and comparisons).
enum class SgemmPath { kOpenBlas, kAuto, kOneDnn };
// The process-wide choice: set_sgemm_path's, else ATTNKIT_SGEMM_PATH (openblas, auto, onednn; read
// on first use; another value is reported on stderr and ignored), else kAuto.
SgemmPath sgemm_path();
// Sets the choice for the whole process (kAuto and kOneDnn act as kOpenBlas without oneDNN).
void set_sgemm_path(SgemmPath path);
// Sets the choice for the scope's lifetime (tests, benchmarks).
using SgemmPathScope = ScopedSetting<SgemmPath, sgemm_path, set_sgemm_path>;
// "openblas" → kOpenBlas, "auto" → kAuto, "onednn" → kOneDnn; anything else throws attnkit::Error.
SgemmPath parse_sgemm_path(std::string_view name);
// The name parse_sgemm_path takes for path.
const char* sgemm_path_name(SgemmPath path);

}  // namespace attnkit
