#pragma once
// Single-precision GEMM: the only place attnkit calls BLAS (OpenBLAS, OpenMP build).
// PyTorch: C = alpha · op(A) @ op(B) + beta · C, row-major, op(X) = X or X.T.
#include <cstdint>
#include <string>

#include "attnkit/core/scoped_setting.hpp"

namespace attnkit {

// The OpenBLAS kernel set in use and how it was chosen, e.g. "SkylakeX (attnkit's choice: OpenBLAS
// picked Prescott on this CPU, ...)" (ops/blas_kernels.cpp: on CPUs the installed OpenBLAS does
// not know, attnkit selects the AVX-512 or AVX2 kernels before the first BLAS call).
const std::string& blas_kernels();

// C[m, n] = alpha·op(A)·op(B) + beta·C, row-major; op(A) is [m, k], op(B) is [k, n]; lda, ldb, ldc
// are row strides in elements of A, B, C as stored (before op). beta = 0 ignores C's contents.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);

// The same product computed with scalar loops in double: the reference for sgemm.
void sgemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                     float* c, int64_t ldc);

// Real path of the shared library serving sgemm in this process (e.g. the OpenMP OpenBLAS build).
std::string blas_library();
// Threads sgemm uses when called from this thread now: 1 inside a parallel region, else the
// innermost BlasThreadsScope's value, else num_threads(). Independent of OpenMP's global default.
int blas_threads();

// The calling thread's own sgemm thread count; 0 when num_threads() applies.
int blas_threads_override();
// Sets the calling thread's sgemm thread count (n <= 0: num_threads()).
void set_blas_threads(int n);
// Sets the threads sgemm uses on this thread for the scope's lifetime (n <= 0: num_threads()).
// Kernels that call sgemm from their own parallel_for hold a scope of 1 so that BLAS never starts
// threads inside a one-thread region.
using BlasThreadsScope = ScopedSetting<int, blas_threads_override, set_blas_threads>;

}  // namespace attnkit
