// sgemm through OpenBLAS (cblas, row-major) and its scalar reference.
#include "attnkit/ops/gemm.hpp"

#include <cblas.h>

#include <vector>

namespace attnkit {

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  (void)blas_kernels();  // kernel selection happens once, before the first BLAS call
  if (m == 0 || n == 0) return;
  if (k == 0) {  // BLAS may skip beta scaling when k = 0; make the result defined
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

void sgemm_reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                     float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const float x = ta ? a[p * lda + i] : a[i * lda + p];
        const float y = tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += double(x) * double(y);
      }
      const double prior = beta == 0 ? 0.0 : double(beta) * c[i * ldc + j];
      c[i * ldc + j] = float(double(alpha) * acc + prior);
    }
}

BlasThreadsScope::BlasThreadsScope(int n) : saved_(openblas_get_num_threads()) {
  openblas_set_num_threads(n);
}
BlasThreadsScope::~BlasThreadsScope() { openblas_set_num_threads(saved_); }

}  // namespace attnkit
