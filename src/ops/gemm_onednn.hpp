#pragma once
// sgemm's oneDNN path (gemm_onednn.cpp): one single-threaded oneDNN matmul, its primitive JIT-
// compiled once per shape and thread, for the shape classes gemm.cpp dispatches to it.
#include <cstdint>

namespace attnkit::detail {

// C[m, n] = alpha·op(A)·op(B) + beta·C, row-major, as sgemm, on the calling thread only.
void onednn_sgemm_1thread(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                          float* c, int64_t ldc);

}  // namespace attnkit::detail
