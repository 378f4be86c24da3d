// sgemm_onednn (ops/gemm_onednn.hpp): C = op(A)·op(B) + beta·C against the float64 reference
// (sgemm_reference) for every transpose, tail sizes and padded row strides with guard columns
// around C, beta 0 and 1; the shape rule, the switch and the bad-beta error; sgemm's routing of
// one-thread calls (inside a parallel region or under BlasThreadsScope(1)) to it; linear_backward's
// d_W on the path for 1 and 2 threads bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/gemm_onednn.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"
#include "test_random.hpp"

namespace attnkit {
namespace {

bool onednn_available() {
  const SgemmPathScope on(SgemmPath::kAuto);
  return sgemm_onednn_applies(true, false, 64, 64, 64, 1.0f, 0.0f);
}

struct Shape {
  int64_t m, n, k;
};

// C (row stride ldc) against the float64 reference within Higham's bound γ_{k+2}·(Σ|a||b| +
// |beta·c0|), and the guard columns past n unchanged.
void expect_within_bound(bool ta, bool tb, const Shape& s, const std::vector<float>& a, int64_t lda,
                         const std::vector<float>& b, int64_t ldb, float beta,
                         const std::vector<float>& c0, const std::vector<float>& c, int64_t ldc) {
  std::vector<float> ref = c0;
  sgemm_reference(ta, tb, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, beta, ref.data(), ldc);
  const double u = std::numeric_limits<float>::epsilon() / 2;
  const double gk = double(s.k + 2) * u / (1 - double(s.k + 2) * u);
  int bad = 0;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      const size_t at = size_t(i * ldc + j);
      double mag = std::fabs(double(beta) * double(c0[at]));
      for (int64_t p = 0; p < s.k; ++p) {
        const double x = ta ? a[size_t(p * lda + i)] : a[size_t(i * lda + p)];
        const double y = tb ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)];
        mag += std::fabs(x * y);
      }
      if (std::fabs(double(c[at]) - double(ref[at])) > gk * mag + 1e-30 && ++bad < 4)
        ADD_FAILURE() << "at (" << i << ", " << j << "): " << c[at] << " vs " << ref[at];
    }
    for (int64_t j = s.n; j < ldc; ++j)
      if (std::memcmp(&c[size_t(i * ldc + j)], &c0[size_t(i * ldc + j)], sizeof(float)) != 0 &&
          ++bad < 4)
        ADD_FAILURE() << "wrote outside C at (" << i << ", " << j << ")";
  }
}

TEST(SgemmOnednn, MatchesTheFloat64ReferenceOnTransposesTailsStridesAndBeta) {
  if (!onednn_available()) GTEST_SKIP() << "built without oneDNN";
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f})
        for (const Shape s : {Shape{1, 1, 1}, Shape{17, 33, 47}, Shape{65, 113, 300},
                              Shape{96, 128, 2048}, Shape{261, 256, 130}, Shape{32, 784, 9}}) {
          SCOPED_TRACE(::testing::Message() << "ta " << ta << " tb " << tb << " beta " << beta
                                            << " " << s.m << "×" << s.n << "×" << s.k);
          const int64_t lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 2, ldc = s.n + 5;
          const auto a = uniform(size_t((ta ? s.k : s.m) * lda), uint32_t(s.m + s.n));
          const auto b = uniform(size_t((tb ? s.n : s.k) * ldb), uint32_t(s.k));
          const auto c0 = uniform(size_t(s.m * ldc), 7);
          std::vector<float> c = c0;
          sgemm_onednn(ta, tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
          expect_within_bound(ta, tb, s, a, lda, b, ldb, beta, c0, c, ldc);
        }
}

TEST(SgemmOnednn, ShapeRuleSwitchAndBadBeta) {
  {
    const SgemmPathScope off(SgemmPath::kOpenBlas);
    EXPECT_FALSE(sgemm_onednn_applies(true, false, 64, 64, 64, 1.0f, 0.0f));
  }
  if (!onednn_available()) GTEST_SKIP() << "built without oneDNN";
  const SgemmPathScope on(SgemmPath::kAuto);
  EXPECT_TRUE(sgemm_onednn_applies(true, false, 32, 32, 32, 1.0f, 1.0f));
  EXPECT_TRUE(sgemm_onednn_applies(true, false, 9, 32, 784, 1.0f, 0.0f));
  EXPECT_FALSE(sgemm_onednn_applies(true, false, 31, 32, 32, 1.0f, 0.0f));  // below 32³
  EXPECT_FALSE(sgemm_onednn_applies(true, false, 64, 64, 64, 0.5f, 0.0f));  // alpha ≠ 1
  EXPECT_FALSE(sgemm_onednn_applies(true, false, 64, 64, 64, 1.0f, 0.5f));  // beta not 0 or 1
  const bool wider = sgemm_onednn_applies(false, false, 256, 256, 256, 1.0f, 0.0f);
  EXPECT_EQ(sgemm_onednn_applies(true, false, 288, 588, 64, 1.0f, 0.0f), wider);  // k < m: not d_W
  // Other transposes only when oneDNN's kernels are wider than OpenBLAS's: the same answer for
  // every one of them.
  EXPECT_EQ(sgemm_onednn_applies(false, true, 256, 256, 256, 1.0f, 0.0f), wider);
  EXPECT_EQ(sgemm_onednn_applies(true, true, 256, 256, 256, 1.0f, 0.0f), wider);
  EXPECT_FALSE(sgemm_onednn_applies(false, true, 64, 261, 256, 1.0f, 0.0f));  // below 2²³
  const bool blas_avx512 = blas_kernels().rfind("SkylakeX", 0) == 0 ||
                           blas_kernels().rfind("Cooperlake", 0) == 0 ||
                           blas_kernels().rfind("SapphireRapids", 0) == 0;
  if (blas_avx512) {
    EXPECT_FALSE(wider) << blas_kernels();
  }
  std::vector<float> a(16 * 16, 1.0f), b(16 * 16, 1.0f), c(16 * 16, 0.0f);
  expect_error([&] { sgemm_onednn(true, false, 16, 16, 16, a.data(), 16, b.data(), 16, 0.5f, c.data(), 16); },
               "sgemm_onednn: beta = 0.5 (0 or 1 only)");
  expect_error([&] { sgemm_onednn(false, false, 16, 16, 16, a.data(), 8, b.data(), 16, 0.0f, c.data(), 16); },
               "sgemm_onednn: lda = 8, ldb = 16 or ldc = 16 is less than the row length (m = 16, n = 16, k = 16)");
}

// The path's names, the forced kOneDnn (every product the path takes, whatever the kernels) and
// kOpenBlas (none).
TEST(SgemmOnednn, PathNamesAndForcedPaths) {
  for (SgemmPath p : {SgemmPath::kOpenBlas, SgemmPath::kAuto, SgemmPath::kOneDnn})
    EXPECT_EQ(parse_sgemm_path(sgemm_path_name(p)), p);
  expect_error([] { parse_sgemm_path("mkl"); },
               "sgemm path: expected 'openblas', 'auto' or 'onednn', got 'mkl'");
  if (!onednn_available()) GTEST_SKIP() << "built without oneDNN";
  {
    const SgemmPathScope all(SgemmPath::kOneDnn);
    EXPECT_TRUE(sgemm_onednn_applies(false, false, 64, 64, 64, 1.0f, 0.0f));
    EXPECT_TRUE(sgemm_onednn_applies(true, false, 288, 588, 64, 1.0f, 1.0f));
    EXPECT_FALSE(sgemm_onednn_applies(false, false, 64, 64, 64, 2.0f, 0.0f));
    EXPECT_TRUE(sgemm_batched_applies(16, 32, 32, 32, 0.0f));
  }
  const SgemmPathScope none(SgemmPath::kOpenBlas);
  EXPECT_FALSE(sgemm_onednn_applies(true, false, 64, 64, 640, 1.0f, 0.0f));
  EXPECT_FALSE(sgemm_batched_applies(16, 32, 32, 32, 0.0f));
}

// sgemm under BlasThreadsScope(1) gives sgemm_onednn's bits when the path is on (and, the path
// off, OpenBLAS's: the two differ in their rounding on this shape), so the routing is real; a
// top-level call without the scope stays on OpenBLAS, also at one thread (compared with OpenBLAS at
// one thread: its bits change with its thread count).
TEST(SgemmOnednn, OneThreadCallsOfSgemmRunOnIt) {
  if (!onednn_available()) GTEST_SKIP() << "built without oneDNN";
  // Aᵀ·B: routed whatever the kernels (A stored [k, m]).
  const Shape s{96, 200, 700};
  const auto a = uniform(size_t(s.m * s.k), 1), b = uniform(size_t(s.k * s.n), 2);
  std::vector<float> direct(size_t(s.m * s.n)), routed(direct.size()), blas(direct.size()),
      top(direct.size());
  sgemm_onednn(true, false, s.m, s.n, s.k, a.data(), s.m, b.data(), s.n, 0.0f, direct.data(), s.n);
  {
    const SgemmPathScope on(SgemmPath::kAuto);
    const BlasThreadsScope one(1);
    sgemm(true, false, s.m, s.n, s.k, 1.0f, a.data(), s.m, b.data(), s.n, 0.0f, routed.data(), s.n);
  }
  {
    const SgemmPathScope off(SgemmPath::kOpenBlas);
    const BlasThreadsScope one(1);
    sgemm(true, false, s.m, s.n, s.k, 1.0f, a.data(), s.m, b.data(), s.n, 0.0f, blas.data(), s.n);
  }
  {
    const SgemmPathScope on(SgemmPath::kAuto);
    const ThreadCountScope threads(1);
    sgemm(true, false, s.m, s.n, s.k, 1.0f, a.data(), s.m, b.data(), s.n, 0.0f, top.data(), s.n);
  }
  const size_t bytes = direct.size() * sizeof(float);
  EXPECT_EQ(std::memcmp(direct.data(), routed.data(), bytes), 0);
  ASSERT_NE(std::memcmp(direct.data(), blas.data(), bytes), 0)
      << "oneDNN and OpenBLAS gave the same bits: this test cannot tell the paths apart";
  EXPECT_EQ(std::memcmp(blas.data(), top.data(), bytes), 0);
}

// sgemm_batched: every transpose, beta 0 and 1, padded rows and gaps between the entries, on the
// batched oneDNN matmul and (path off) one sgemm per entry, each entry within the float64 bound;
// under BlasThreadsScope(1) it gives sgemm_batched_onednn's bits.
TEST(SgemmOnednn, BatchedMatchesTheFloat64ReferenceOnEitherPath) {
  if (!onednn_available()) GTEST_SKIP() << "built without oneDNN";
  const int64_t batch = 3;
  for (bool onednn : {true, false})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f})
          for (const Shape s : {Shape{17, 33, 47}, Shape{64, 96, 16}}) {
            SCOPED_TRACE(::testing::Message() << "oneDNN " << onednn << " ta " << ta << " tb " << tb
                                              << " beta " << beta << " " << s.m << "×" << s.n << "×" << s.k);
            const SgemmPathScope path(onednn ? SgemmPath::kAuto : SgemmPath::kOpenBlas);
            const BlasThreadsScope one(1);
            ASSERT_EQ(sgemm_batched_applies(batch, s.m, s.n, s.k, beta), onednn);
            const int64_t lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 2, ldc = s.n + 5;
            const int64_t sa = (ta ? s.k : s.m) * lda + 7, sb = (tb ? s.n : s.k) * ldb + 1,
                          sc = s.m * ldc + 9;
            const auto a = uniform(size_t(batch * sa), uint32_t(s.m + s.n));
            const auto b = uniform(size_t(batch * sb), uint32_t(s.k));
            const auto c0 = uniform(size_t(batch * sc), 7);
            std::vector<float> c = c0;
            sgemm_batched(ta, tb, batch, s.m, s.n, s.k, a.data(), lda, sa, b.data(), ldb, sb, beta,
                          c.data(), ldc, sc);
            if (onednn) {
              std::vector<float> direct = c0;
              sgemm_batched_onednn(ta, tb, batch, s.m, s.n, s.k, a.data(), lda, sa, b.data(), ldb,
                                   sb, beta, direct.data(), ldc, sc);
              EXPECT_EQ(std::memcmp(c.data(), direct.data(), c.size() * sizeof(float)), 0);
            }
            for (int64_t e = 0; e < batch; ++e) {
              SCOPED_TRACE(::testing::Message() << "entry " << e);
              auto part = [](const std::vector<float>& x, int64_t at, int64_t len) {
                return std::vector<float>(x.begin() + at, x.begin() + at + len);
              };
              const int64_t rows_c = s.m * ldc;
              expect_within_bound(ta, tb, s, part(a, e * sa, sa), lda, part(b, e * sb, sb), ldb,
                                  beta, part(c0, e * sc, rows_c), part(c, e * sc, rows_c), ldc);
              for (int64_t g = e * sc + rows_c; g < (e + 1) * sc; ++g)  // the gap: never written
                if (std::memcmp(&c[size_t(g)], &c0[size_t(g)], sizeof(float)) != 0) {
                  ADD_FAILURE() << "wrote between the entries at " << g;
                  break;
                }
            }
          }
}

// GPT-small-like d_W shapes (tiled: [688, 256]; chunked: [96, 256] over 1100 tokens) on the
// oneDNN path: within the linear layer's reference bars (linear_test.cpp runs them on both paths)
// and bitwise the same for 1 and 2 threads.
TEST(SgemmOnednn, LinearWeightGradientIsIdenticalForAnyThreadCount) {
  if (!onednn_available()) GTEST_SKIP() << "built without oneDNN";
  const SgemmPathScope on(SgemmPath::kAuto);
  for (const auto [t, in, out] : {std::array<int64_t, 3>{700, 256, 688}, {1100, 256, 96}}) {
    SCOPED_TRACE(::testing::Message() << t << " tokens, [" << out << ", " << in << "]");
    const nn_testing::Mat x = nn_testing::Mat(t, in).randn(3), w = nn_testing::Mat(out, in).randn(4),
                          d_y = nn_testing::Mat(t, out).randn(5);
    nn_testing::Mat d_w[2] = {nn_testing::Mat(out, in), nn_testing::Mat(out, in)};
    for (int threads : {1, 2}) {
      ThreadCountScope scope(threads);
      linear_backward({}, d_w[threads - 1].view(), {}, d_y.cview(), x.cview(), w.cview());
    }
    EXPECT_TRUE(nn_testing::bitwise_equal(d_w[0], d_w[1]));
  }
}

}  // namespace
}  // namespace attnkit
