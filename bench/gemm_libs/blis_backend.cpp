// BLIS (OpenMP build) through its typed API, bli_sgemm, which takes a row and a column stride per
// operand, so row-major and transposed operands need no copy. The library is opened with
// RTLD_LOCAL: it also exports cblas_* symbols, which must not replace OpenBLAS's in this process.
#include <dlfcn.h>

#include <blis.h>

#include "backends.hpp"

namespace gemm_libs {
namespace {

using SgemmFn = void (*)(trans_t, trans_t, dim_t, dim_t, dim_t, float*, float*, inc_t, inc_t,
                         float*, inc_t, inc_t, float*, float*, inc_t, inc_t);
using SetThreadsFn = void (*)(dim_t);

struct BlisApi {
  SgemmFn sgemm = nullptr;
  SetThreadsFn set_threads = nullptr;
};

class BlisRunner : public Runner {
 public:
  BlisRunner(BlisApi api, const Problem& p, Operands& o) : api_(api), p_(p), o_(o) {}
  void run(int threads) override {
    api_.set_threads(threads);  // BLIS's global thread count (its OpenMP build reads it per call)
    float one = 1.0f, beta = p_.beta;
    // Row-major X [r, c] with row stride ld: element (i, j) at i·ld + j; op(X) = Xᵀ is the same
    // buffer with the strides swapped, which BLIS expresses with its transpose flag.
    api_.sgemm(p_.ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, p_.tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
               p_.m, p_.n, p_.k, &one, o_.a.data(), o_.lda, 1, o_.b.data(), o_.ldb, 1, &beta,
               o_.c.data(), o_.ldc, 1);
  }

 private:
  BlisApi api_;
  Problem p_;
  Operands& o_;
};

class Blis : public Library {
 public:
  explicit Blis(BlisApi api) : api_(api) {}
  std::string name() const override { return "BLIS"; }
  std::unique_ptr<Runner> prepare(const Problem& p, Operands& o) override {
    return std::make_unique<BlisRunner>(api_, p, o);
  }

 private:
  BlisApi api_;
};

}  // namespace

std::unique_ptr<Library> make_blis() {
  void* h = dlopen(GEMM_LIBS_BLIS_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!h) return nullptr;
  BlisApi api;
  api.sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "bli_sgemm"));
  api.set_threads = reinterpret_cast<SetThreadsFn>(dlsym(h, "bli_thread_set_num_threads"));
  if (!api.sgemm || !api.set_threads) return nullptr;
  return std::make_unique<Blis>(api);
}

}  // namespace gemm_libs
