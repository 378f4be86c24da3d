// Reference for gemm_bf16: op(A)·op(B) + beta·C in double from the bfloat16-rounded A and B, so
// it differs from gemm_bf16 only by gemm_bf16's float32 accumulation.
#include "attnkit/ops/gemm_bf16.hpp"

namespace attnkit {

void gemm_bf16_reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                         int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                         int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const float x = round_to_bf16(ta ? a[p * lda + i] : a[i * lda + p]);
        const float y = round_to_bf16(tb ? b[j * ldb + p] : b[p * ldb + j]);
        acc += double(x) * double(y);
      }
      const double prior = beta == 0 ? 0.0 : double(beta) * c[i * ldc + j];
      c[i * ldc + j] = float(acc + prior);
    }
}

}  // namespace attnkit
