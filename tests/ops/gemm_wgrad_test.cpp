// sgemm_tn_onednn (ops/gemm_wgrad.hpp): C = Aᵀ·B + beta·C against the float64 reference
// (sgemm_reference) on tail sizes and padded row strides with guard columns around C, beta 0 and 1;
// the shape rule, the switch and the bad-beta error; linear_backward's d_W on the path for 1 and 2
// threads bitwise.
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
#include "attnkit/ops/gemm_wgrad.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"
#include "test_random.hpp"

namespace attnkit {
namespace {

bool wgrad_available() {
  const WgradGemmScope on(true);
  return wgrad_gemm_applies(64, 64, 64);
}

TEST(SgemmTnOnednn, MatchesTheFloat64ReferenceOnTailsStridesAndBeta) {
  if (!wgrad_available()) GTEST_SKIP() << "built without oneDNN";
  struct Shape {
    int64_t m, n, k;
  };
  for (float beta : {0.0f, 1.0f})
    for (const Shape s : {Shape{1, 1, 1}, Shape{17, 33, 47}, Shape{65, 113, 300},
                          Shape{96, 128, 2048}, Shape{261, 256, 130}}) {
      SCOPED_TRACE(::testing::Message() << "beta " << beta << " " << s.m << "×" << s.n << "×" << s.k);
      const int64_t lda = s.m + 3, ldb = s.n + 2, ldc = s.n + 5;
      const auto a = uniform(size_t(s.k * lda), uint32_t(s.m + s.n));
      const auto b = uniform(size_t(s.k * ldb), uint32_t(s.k));
      const auto c0 = uniform(size_t(s.m * ldc), 7);
      std::vector<float> c = c0, ref = c0;
      sgemm_tn_onednn(s.m, s.n, s.k, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
      sgemm_reference(true, false, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, beta,
                      ref.data(), ldc);
      // Higham's bound γ_{k+2}·(Σ|a||b| + |beta·c0|).
      const double u = std::numeric_limits<float>::epsilon() / 2;
      const double gk = double(s.k + 2) * u / (1 - double(s.k + 2) * u);
      int bad = 0;
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          const size_t at = size_t(i * ldc + j);
          double mag = std::fabs(double(beta) * double(c0[at]));
          for (int64_t p = 0; p < s.k; ++p)
            mag += std::fabs(double(a[size_t(p * lda + i)]) * double(b[size_t(p * ldb + j)]));
          if (std::fabs(double(c[at]) - double(ref[at])) > gk * mag + 1e-30 && ++bad < 4)
            ADD_FAILURE() << "at (" << i << ", " << j << "): " << c[at] << " vs " << ref[at];
        }
        for (int64_t j = s.n; j < ldc; ++j)
          if (std::memcmp(&c[size_t(i * ldc + j)], &c0[size_t(i * ldc + j)], sizeof(float)) != 0 &&
              ++bad < 4)
            ADD_FAILURE() << "wrote outside C at (" << i << ", " << j << ")";
      }
    }
}

TEST(SgemmTnOnednn, ShapeRuleSwitchAndBadBeta) {
  {
    const WgradGemmScope off(false);
    EXPECT_FALSE(wgrad_gemm_applies(64, 64, 64));
  }
  if (!wgrad_available()) GTEST_SKIP() << "built without oneDNN";
  const WgradGemmScope on(true);
  EXPECT_TRUE(wgrad_gemm_applies(16, 16, 16));
  EXPECT_FALSE(wgrad_gemm_applies(15, 64, 64));
  EXPECT_FALSE(wgrad_gemm_applies(64, 64, 15));
  std::vector<float> a(16 * 16, 1.0f), b(16 * 16, 1.0f), c(16 * 16, 0.0f);
  expect_error([&] { sgemm_tn_onednn(16, 16, 16, a.data(), 16, b.data(), 16, 0.5f, c.data(), 16); },
               "sgemm_tn_onednn: beta = 0.5 (0 or 1 only)");
}

// GPT-small-like d_W shapes (tiled: [688, 256]; chunked: [96, 256] over 1100 tokens) on the
// oneDNN path: within the linear layer's reference bars (linear_test.cpp runs them on both paths)
// and bitwise the same for 1 and 2 threads.
TEST(SgemmTnOnednn, LinearWeightGradientIsIdenticalForAnyThreadCount) {
  if (!wgrad_available()) GTEST_SKIP() << "built without oneDNN";
  const WgradGemmScope on(true);
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
