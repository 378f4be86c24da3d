// sgemm through OpenBLAS (cblas, row-major), its one-thread calls through oneDNN's matmul where that
// applies (ops/gemm_onednn.hpp), and its scalar reference.
//
// Thread count: OpenBLAS's OpenMP build sizes each call from omp_get_max_threads() of the calling
// thread, a value any library in the process may change (importing PyTorch sets it to 1). sgemm
// therefore sets it to attnkit's own count for the duration of the call and restores the caller's
// value afterwards, so neither side changes the other's threading.
#include "attnkit/ops/gemm.hpp"

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm_onednn.hpp"

namespace attnkit {
namespace {
thread_local int t_blas_threads = 0;  // BlasThreadsScope's value on this thread; 0 = num_threads()

// True for one thread's tile of a kernel's own parallel split (inside a parallel region, or under
// BlasThreadsScope(1) even when the split ran on one thread): such calls take the same library for
// any thread count, so the kernels' results stay independent of it.
bool one_thread_tile() { return omp_in_parallel() || t_blas_threads == 1; }
}  // namespace

int blas_threads() {
  if (omp_in_parallel()) return 1;
  return t_blas_threads > 0 ? t_blas_threads : num_threads();
}

std::string blas_library() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cblas_sgemm), &info) == 0 || !info.dli_fname) return "unknown";
  char* real = realpath(info.dli_fname, nullptr);  // the file behind Debian's alternatives links
  if (!real) return info.dli_fname;
  std::string path(real);
  std::free(real);
  return path;
}

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  (void)blas_kernels();  // kernel selection happens once, before the first BLAS call
  check(m >= 0 && n >= 0 && k >= 0, "sgemm: negative size [", m, ", ", n, "] over ", k);
  if (m == 0 || n == 0) return;
  check(lda >= std::max<int64_t>(1, ta ? m : k) && ldb >= std::max<int64_t>(1, tb ? k : n) &&
            ldc >= std::max<int64_t>(1, n),
        "sgemm: lda = ", lda, ", ldb = ", ldb, " or ldc = ", ldc,
        " is less than the row length (m = ", m, ", n = ", n, ", k = ", k, ")");
  if (k == 0) {  // BLAS may skip beta scaling when k = 0; make the result defined
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  if (one_thread_tile() && sgemm_onednn_applies(ta, tb, m, n, k, alpha, beta)) {
    sgemm_onednn(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int want = blas_threads();
  const int saved = omp_get_max_threads();
  if (saved != want) omp_set_num_threads(want);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  if (saved != want) omp_set_num_threads(saved);
}

void sgemm_batched(bool ta, bool tb, int64_t batch, int64_t m, int64_t n, int64_t k,
                   const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                   int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c) {
  if (one_thread_tile() && sgemm_batched_applies(batch, m, n, k, beta)) {
    sgemm_batched_onednn(ta, tb, batch, m, n, k, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                         stride_c);
    return;
  }
  for (int64_t e = 0; e < batch; ++e)
    sgemm(ta, tb, m, n, k, 1.0f, a + e * stride_a, lda, b + e * stride_b, ldb, beta,
          c + e * stride_c, ldc);
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

int blas_threads_override() { return t_blas_threads; }

void set_blas_threads(int n) { t_blas_threads = n > 0 ? n : 0; }

}  // namespace attnkit
