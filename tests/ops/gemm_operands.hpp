#pragma once
// Random operands of a GEMM test in [-1, 1): A, B with padded row strides (ld = cols + 3) and C
// with 5 guard columns per row, for C[m, n] = op(A)·op(B) with op(A) [m, k] and op(B) [k, n].
#include <cstdint>
#include <random>
#include <vector>

namespace attnkit {

struct GemmOperands {
  bool ta, tb;
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c;
  GemmOperands(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, uint32_t seed)
      : ta(trans_a), tb(trans_b) {
    const int64_t ar = ta ? k : m, ac = ta ? m : k;
    const int64_t br = tb ? n : k, bc = tb ? k : n;
    lda = ac + 3, ldb = bc + 3, ldc = n + 5;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    a.resize(size_t(ar * lda)), b.resize(size_t(br * ldb)), c.resize(size_t(m * ldc));
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    for (float& x : c) x = u(rng);
  }
  // op(A)[i, p] and op(B)[p, j].
  float at_a(int64_t i, int64_t p) const { return ta ? a[size_t(p * lda + i)] : a[size_t(i * lda + p)]; }
  float at_b(int64_t p, int64_t j) const { return tb ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)]; }
};

}  // namespace attnkit
