#pragma once
// One GEMM problem and the libraries that run it, each with its best calling pattern, for
// bench/gemm_libs (attnkit's own shapes through OpenBLAS, BLIS, oneDNN and libxsmm).
// Row-major throughout: C[m, n] = op(A)·op(B) + beta·C, op(A) [m, k], op(B) [k, n].
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gemm_libs {

struct Problem {
  std::string group;    // shape class: "flash fwd", "linear", "conv", "decode", ...
  std::string name;     // what the product is, e.g. "GPT-s qkv fwd"
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  float beta = 0;       // 0 or 1 (accumulating products)
  bool b_is_weight = false;  // op(B) changes once per optimizer step: a library may pack it once
  int64_t ldb = 0, ldc = 0;  // row strides of B and C when they are views into wider matrices
                             // (one tile of parallel_sgemm); 0 = dense
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

// Operands of one problem, dense, row-major as stored (before op).
struct Operands {
  std::vector<float> a, b, c;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

// A library bound to one problem: setup (JIT, primitive creation, weight packing) happens in
// prepare(), outside the timed region; run() computes C once with `threads` threads.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual void run(int threads) = 0;
};

class Library {
 public:
  virtual ~Library() = default;
  virtual std::string name() const = 0;
  // Runner for p on ops (ops.c is the output), or null if the library cannot run p.
  virtual std::unique_ptr<Runner> prepare(const Problem& p, Operands& ops) = 0;
};

std::unique_ptr<Library> make_openblas();
std::unique_ptr<Library> make_blis();      // null if libblis cannot be loaded
std::unique_ptr<Library> make_onednn(bool pack_weights);
std::unique_ptr<Library> make_libxsmm();

// Scoped omp_set_num_threads for libraries that size their work from omp_get_max_threads().
class OmpThreads {
 public:
  explicit OmpThreads(int n);
  ~OmpThreads();
 private:
  int saved_;
};

}  // namespace gemm_libs
