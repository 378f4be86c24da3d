#pragma once
// Single-precision GEMM (gemm_bf16.hpp has the bf16 products). sgemm: OpenBLAS (OpenMP
// build), the only BLAS call; its one-thread calls and sgemm_batched go to oneDNN's matmul where
// gemm_onednn.hpp's rules say it is faster. sgemm_packed: products with a weight as B, the weight reordered once into oneDNN's
// matmul layout (gemm_packed.cpp; oneDNN builds, ATTNKIT_WITH_DNNL).
// PyTorch: C = alpha · op(A) @ op(B) + beta · C, row-major, op(X) = X or X.T.
#include <cstdint>
#include <memory>
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

// C_e[m, n] = op(A_e)·op(B_e) + beta·C_e for e < batch (A_e at a + e·stride_a, B_e at
// b + e·stride_b, C_e at c + e·stride_c, each as in sgemm), beta 0 or 1, as one thread's call
// (inside a parallel region or under BlasThreadsScope(1)): one oneDNN batched matmul where
// sgemm_batched_applies, else sgemm per entry.
void sgemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                   const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                   int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c);

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

// A weight op(B) [k, n] reordered once into the packed GEMM kernel's layout (oneDNN's blocked
// weights), for many products C[m, n] = A[m, k]·op(B). Immutable; shared by the products of a
// training step through a WeightPackCache (core/weight_pack_cache.hpp). Opaque.
struct PackedGemmB;

// Rows of A per sgemm_packed call that the packing is made for (products of more rows are split
// into tiles of at most this many rows by the caller).
constexpr int64_t kPackedGemmRows = 256;

// True when the packed path serves C[m, n] = A[m, k]·op(B): a oneDNN build, the path switched on
// (packed_gemm_enabled) and m, n, k large enough to repay the reorder. A function of the shape and
// the switch only, never of the thread count.
bool packed_gemm_applies(int64_t m, int64_t n, int64_t k);
// op(B) [k, n] packed (B row-major with row stride ldb, stored [n, k] when trans_b); the reorder
// runs on the calling thread. Given `into`, a packing of the same k, n held by nobody else, it is
// repacked in place and returned (no new memory); else a new packing. Throws attnkit::Error when
// the path is unavailable.
std::shared_ptr<PackedGemmB> pack_gemm_b(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb,
                                         std::shared_ptr<PackedGemmB> into = nullptr);
// C[m, n] = A[m, k]·op(B) (assigned; A and C row-major with row strides lda, ldc), m <=
// kPackedGemmRows, on the calling thread only: one single-threaded oneDNN matmul, so a row's
// result depends only on (m, n, k), never on the thread count.
void sgemm_packed(int64_t m, const float* a, int64_t lda, const PackedGemmB& b, float* c, int64_t ldc);

// Whether the packed path is on (default on; ATTNKIT_PACKED_GEMM=0 in the environment turns it
// off for the process, for same-build comparisons). Process-wide.
bool packed_gemm_enabled();
// Switches the packed path on or off for the whole process (it applies only in oneDNN builds).
void set_packed_gemm_enabled(bool on);
// Turns the packed path on or off for the scope's lifetime (tests, benchmarks).
using PackedGemmScope = ScopedSetting<bool, packed_gemm_enabled, set_packed_gemm_enabled>;

}  // namespace attnkit
