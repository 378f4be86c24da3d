// sgemm (ops/gemm.hpp): every transpose, alpha and beta, tail sizes and strided operands against
// the float64 reference, with guard bands around C, at 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"
#include "ops/gemm_operands.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

struct Case {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
};

// A test case's operands (gemm_operands.hpp).
struct Operands : GemmOperands {
  Operands(const Case& cs, uint32_t seed) : GemmOperands(cs.ta, cs.tb, cs.m, cs.n, cs.k, seed) {}
};

// Worst-case float32 rounding bound of one dot product of length k (Higham's γ_k, k·u/(1 - k·u)),
// times Σ|a||b|, plus the rounding of alpha, beta·C and the final sum.
double bound(const Case& cs, const Operands& o, const std::vector<float>& c0, int64_t i, int64_t j) {
  const double u = std::numeric_limits<float>::epsilon() / 2;
  double mag = 0;
  for (int64_t p = 0; p < cs.k; ++p) {
    const double x = cs.ta ? o.a[size_t(p * o.lda + i)] : o.a[size_t(i * o.lda + p)];
    const double y = cs.tb ? o.b[size_t(j * o.ldb + p)] : o.b[size_t(p * o.ldb + j)];
    mag += std::fabs(x * y);
  }
  const double gk = double(cs.k + 3) * u / (1 - double(cs.k + 3) * u);
  return gk * (std::fabs(cs.alpha) * mag + std::fabs(cs.beta * c0[size_t(i * o.ldc + j)])) + 1e-30;
}

void expect_matches_reference(const Case& cs) {
  Operands o(cs, uint32_t(cs.m * 7 + cs.n * 3 + cs.k));
  const std::vector<float> c0 = o.c;
  std::vector<float> ref = o.c;
  sgemm_reference(cs.ta, cs.tb, cs.m, cs.n, cs.k, cs.alpha, o.a.data(), o.lda, o.b.data(), o.ldb,
                  cs.beta, ref.data(), o.ldc);
  sgemm(cs.ta, cs.tb, cs.m, cs.n, cs.k, cs.alpha, o.a.data(), o.lda, o.b.data(), o.ldb, cs.beta,
        o.c.data(), o.ldc);
  const std::string lib = "threads " + std::to_string(num_threads());
  int bad = 0;
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < cs.n; ++j) {
      const size_t at = size_t(i * o.ldc + j);
      if (std::fabs(double(o.c[at]) - double(ref[at])) > bound(cs, o, c0, i, j) && ++bad < 4)
        ADD_FAILURE() << lib << " " << cs.ta << cs.tb << " " << cs.m << "×" << cs.n << "×" << cs.k
                      << " at (" << i << ", " << j << "): " << o.c[at] << " vs " << ref[at];
    }
    for (int64_t j = cs.n; j < o.ldc; ++j)  // guard band: never written
      if (std::memcmp(&o.c[size_t(i * o.ldc + j)], &c0[size_t(i * o.ldc + j)], sizeof(float)) != 0 && ++bad < 4)
        ADD_FAILURE() << lib << " wrote outside C at (" << i << ", " << j << ")";
  }
}

TEST(Sgemm, MatchesTheFloat64ReferenceOnTailsTransposesAlphaBeta) {
  const int64_t sizes[] = {1, 7, 65, 113};
  for (int threads : {1, 2}) {
    ThreadCountScope scope(threads);
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int64_t m : sizes)
          for (int64_t n : sizes)
            for (int64_t k : {int64_t(17), int64_t(64), int64_t(130)}) {
              expect_matches_reference({ta, tb, m, n, k, 1.0f, 0.0f});
              if (m == n) expect_matches_reference({ta, tb, m, n, k, 0.5f, 1.0f});
            }
    // larger products with tails, and accumulation into C
    expect_matches_reference({false, true, 600, 530, 96, 1.0f, 1.0f});
    expect_matches_reference({false, false, 530, 700, 72, -0.25f, 0.5f});
  }
}

// Bad sizes and strides are typed errors on every path (OpenBLAS would only print a message and
// return with C untouched).
TEST(Sgemm, BadSizesAndStridesAreErrors) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, 0.0f);
  expect_error([&] { sgemm(false, false, -1, 4, 4, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 4); },
               "sgemm: negative size [-1, 4] over 4");
  expect_error([&] { sgemm(false, false, 4, 4, 8, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 4); },
               "sgemm: lda = 4, ldb = 4 or ldc = 4 is less than the row length (m = 4, n = 4, k = 8)");
  expect_error([&] { sgemm(true, true, 4, 8, 4, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 4); },
               "sgemm: lda = 4, ldb = 4 or ldc = 4 is less than the row length (m = 4, n = 8, k = 4)");
  EXPECT_EQ(c, std::vector<float>(64, 0.0f));
}

}  // namespace
}  // namespace attnkit
