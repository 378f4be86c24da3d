// OpenBLAS (OpenMP build) through cblas_sgemm: it packs both operands on every call and offers no
// way to keep a packed operand, so its best pattern is the plain call.
#include <cblas.h>
#include <omp.h>

#include "backends.hpp"

namespace gemm_libs {

OmpThreads::OmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
OmpThreads::~OmpThreads() { omp_set_num_threads(saved_); }

namespace {

class OpenBlasRunner : public Runner {
 public:
  OpenBlasRunner(const Problem& p, Operands& o) : p_(p), o_(o) {}
  void run(int threads) override {
    OmpThreads scope(threads);
    cblas_sgemm(CblasRowMajor, p_.ta ? CblasTrans : CblasNoTrans, p_.tb ? CblasTrans : CblasNoTrans,
                int(p_.m), int(p_.n), int(p_.k), 1.0f, o_.a.data(), int(o_.lda), o_.b.data(),
                int(o_.ldb), p_.beta, o_.c.data(), int(o_.ldc));
  }

 private:
  Problem p_;
  Operands& o_;
};

class OpenBlas : public Library {
 public:
  std::string name() const override { return "OpenBLAS"; }
  std::unique_ptr<Runner> prepare(const Problem& p, Operands& o) override {
    return std::make_unique<OpenBlasRunner>(p, o);
  }
};

}  // namespace

std::unique_ptr<Library> make_openblas() { return std::make_unique<OpenBlas>(); }

}  // namespace gemm_libs
