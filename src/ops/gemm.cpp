// sgemm through OpenBLAS (cblas, row-major) or oneDNN (matmul primitive), chosen per shape class,
// and its scalar reference.
//
// Shape classes (bench/gemm_libs measures every library on attnkit's shapes; docs/performance.md):
// products with op(A) not transposed and m, n, k of at least kOneDnnMin{M,N,K} (linear layers'
// forward and d_x, convolution columns) run on oneDNN, which was faster there; the rest (d_W-type
// products with a transposed A, small tiles, decode-sized rows) stay on OpenBLAS. The oneDNN path
// cuts C into fixed kOneDnnTile × kOneDnnTile tiles, each computed by one single-threaded matmul,
// and hands the tiles to the threads: every element is summed the same way for any thread count.
// ATTNKIT_SGEMM_LIBRARY=openblas in the environment sends every shape to OpenBLAS (comparisons).
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

#include "attnkit/core/parallel.hpp"
#include "ops/gemm_onednn.hpp"

namespace attnkit {
namespace {
thread_local int t_blas_threads = 0;  // BlasThreadsScope's value on this thread; 0 = num_threads()

constexpr int64_t kOneDnnMinM = 32, kOneDnnMinN = 64, kOneDnnMinK = 64;
constexpr int64_t kOneDnnTile = 512;  // tile side of C on the oneDNN path (parallel_sgemm's tiles)

// C tiles of kOneDnnTile × kOneDnnTile, each one single-threaded oneDNN matmul, over `threads`.
void onednn_sgemm_tiled(int threads, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                        float* c, int64_t ldc) {
  const int64_t tiles_m = (m + kOneDnnTile - 1) / kOneDnnTile, tiles_n = (n + kOneDnnTile - 1) / kOneDnnTile;
  auto tile = [&](int64_t idx) {
    const int64_t i0 = (idx / tiles_n) * kOneDnnTile, j0 = (idx % tiles_n) * kOneDnnTile;
    const int64_t i1 = std::min(m, i0 + kOneDnnTile), j1 = std::min(n, j0 + kOneDnnTile);
    // op(A)'s row i0 and op(B)'s column j0 (see parallel_sgemm in nn/nn_common.cpp)
    const float* a0 = ta ? a + i0 : a + i0 * lda;
    const float* b0 = tb ? b + j0 * ldb : b + j0;
    detail::onednn_sgemm_1thread(ta, tb, i1 - i0, j1 - j0, k, alpha, a0, lda, b0, ldb, beta,
                                 c + i0 * ldc + j0, ldc);
  };
  const int64_t tiles = tiles_m * tiles_n;
  if (threads <= 1 || tiles == 1) {
    for (int64_t idx = 0; idx < tiles; ++idx) tile(idx);
    return;
  }
  // OpenMP directly, with sgemm's own count (as for OpenBLAS above), not attnkit's global one
#pragma omp parallel for num_threads(int(std::min<int64_t>(threads, tiles))) schedule(dynamic, 1)
  for (int64_t idx = 0; idx < tiles; ++idx) tile(idx);
}
}  // namespace

const char* sgemm_library(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  (void)tb;
  static const bool openblas_only = [] {
    const char* v = std::getenv("ATTNKIT_SGEMM_LIBRARY");
    return v && std::string(v) == "openblas";
  }();
  if (openblas_only) return "OpenBLAS";
  return !ta && m >= kOneDnnMinM && n >= kOneDnnMinN && k >= kOneDnnMinK ? "oneDNN" : "OpenBLAS";
}

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
  if (m == 0 || n == 0) return;
  if (k == 0) {  // BLAS may skip beta scaling when k = 0; make the result defined
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  const int want = blas_threads();
  if (sgemm_library(ta, tb, m, n, k)[0] == 'o') {
    onednn_sgemm_tiled(want, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int saved = omp_get_max_threads();
  if (saved != want) omp_set_num_threads(want);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  if (saved != want) omp_set_num_threads(saved);
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

BlasThreadsScope::BlasThreadsScope(int n) : saved_(t_blas_threads) { t_blas_threads = n > 0 ? n : 0; }
BlasThreadsScope::~BlasThreadsScope() { t_blas_threads = saved_; }

}  // namespace attnkit
