// libxsmm 1.17 through JIT small-GEMM kernels (libxsmm_smmdispatch), which compute one register-
// blocked product without packing. libxsmm is column-major: the row-major C = op(A)·op(B) is the
// column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, so B is libxsmm's first operand. Large products are cut into
// blocks of C (kBlockRows × kBlockCols, K in kBlockK slices accumulated with beta = 1), spread
// over threads with OpenMP. A transposed operand the JIT does not support is transposed once
// outside the timed region when it is a weight, and inside it (counted) otherwise.
#include <libxsmm.h>
#include <omp.h>

#include <algorithm>

#include "backends.hpp"

namespace gemm_libs {
namespace {

constexpr int64_t kBlockRows = 64, kBlockCols = 256, kBlockK = 512;

// X [rows, cols] with row stride ld → Xᵀ [cols, rows], dense.
void transpose(const float* x, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& out) {
  out.resize(size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[size_t(j * rows + i)] = x[i * ld + j];
}

class XsmmRunner : public Runner {
 public:
  XsmmRunner(const Problem& p, Operands& o) : p_(p), o_(o) {
    // The JIT's own transposes are probed once; an unsupported one falls back to a copy.
    const libxsmm_blasint ld = 64;
    const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    const float one = 1.0f;
    int fa = LIBXSMM_GEMM_FLAG_TRANS_A, fb = LIBXSMM_GEMM_FLAG_TRANS_B;
    jit_trans_b_op_ = p.tb && libxsmm_smmdispatch(32, 32, 32, &ld, &ld, &ld, &one, &one, &fa, &prefetch);
    jit_trans_a_op_ = p.ta && libxsmm_smmdispatch(32, 32, 32, &ld, &ld, &ld, &one, &one, &fb, &prefetch);
    if (p.tb && !jit_trans_b_op_ && p.b_is_weight) {
      transpose(o.b.data(), p.n, p.k, o.ldb, bt_);  // [n, k] → [k, n], once
      b_ready_ = true;
    }
    const libxsmm_blasint rows = std::min(kBlockRows, p.m), cols = std::min(kBlockCols, p.n),
                          kk = std::min(kBlockK, p.k);
    const libxsmm_blasint lb = p.ta && jit_trans_a_op_ ? rows : kk, la = p.tb && jit_trans_b_op_ ? kk : cols;
    const int flags = (p.tb && jit_trans_b_op_ ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) |
                      (p.ta && jit_trans_a_op_ ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
    ok_ = libxsmm_smmdispatch(cols, rows, kk, &la, &lb, &cols, &one, &one, &flags, &prefetch);
  }
  bool ok() const { return ok_; }

  void run(int threads) override {
    const float* a = o_.a.data();
    int64_t lda = o_.lda;
    bool ta = p_.ta;
    if (p_.ta && !jit_trans_a_op_) {  // A stored [k, m] → [m, k]
      transpose(o_.a.data(), p_.k, p_.m, o_.lda, at_);
      a = at_.data(), lda = p_.k, ta = false;
    }
    const float* b = o_.b.data();
    int64_t ldb = o_.ldb;
    bool tb = p_.tb;
    if (p_.tb && !jit_trans_b_op_) {  // B stored [n, k] → [k, n]
      if (!b_ready_) transpose(o_.b.data(), p_.n, p_.k, o_.ldb, bt_);
      b = bt_.data(), ldb = p_.n, tb = false;
    }
    const int64_t bm = (p_.m + kBlockRows - 1) / kBlockRows, bn = (p_.n + kBlockCols - 1) / kBlockCols;
    const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    float* c = o_.c.data();
    const int64_t ldc = o_.ldc, m = p_.m, n = p_.n, k = p_.k;
    const float beta0 = p_.beta;
#pragma omp parallel for num_threads(threads) schedule(dynamic)
    for (int64_t t = 0; t < bm * bn; ++t) {
      const int64_t i0 = (t / bn) * kBlockRows, j0 = (t % bn) * kBlockCols;
      const libxsmm_blasint rows = std::min(kBlockRows, m - i0), cols = std::min(kBlockCols, n - j0);
      for (int64_t p0 = 0; p0 < k; p0 += kBlockK) {
        const libxsmm_blasint kk = std::min(kBlockK, k - p0);
        const float one = 1.0f, beta = p0 == 0 ? beta0 : 1.0f;
        // libxsmm's A' = op(B)ᵀ [cols, kk]: B [k, n] row-major is column-major [n, k] (no flag);
        // B [n, k] (tb) needs TRANS_A. Its B' = op(A)ᵀ [kk, rows]: likewise with TRANS_B for ta.
        const int flags = (tb ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) |
                          (beta == 0 ? LIBXSMM_GEMM_FLAG_BETA_0 : 0);
        const libxsmm_blasint la = libxsmm_blasint(ldb), lb = libxsmm_blasint(lda), lc = libxsmm_blasint(ldc);
        const libxsmm_smmfunction f =
            libxsmm_smmdispatch(cols, rows, kk, &la, &lb, &lc, &one, &beta, &flags, &prefetch);
        const float* ap = tb ? b + j0 * ldb + p0 : b + p0 * ldb + j0;
        const float* bp = ta ? a + p0 * lda + i0 : a + i0 * lda + p0;
        f(ap, bp, c + i0 * ldc + j0);
      }
    }
  }

 private:
  Problem p_;
  Operands& o_;
  bool jit_trans_a_op_ = false, jit_trans_b_op_ = false, b_ready_ = false, ok_ = false;
  std::vector<float> at_, bt_;
};

class Xsmm : public Library {
 public:
  Xsmm() { libxsmm_init(); }
  std::string name() const override { return "libxsmm"; }
  std::unique_ptr<Runner> prepare(const Problem& p, Operands& o) override {
    auto r = std::make_unique<XsmmRunner>(p, o);
    if (!r->ok()) return nullptr;
    return r;
  }
};

}  // namespace

std::unique_ptr<Library> make_libxsmm() { return std::make_unique<Xsmm>(); }

}  // namespace gemm_libs
