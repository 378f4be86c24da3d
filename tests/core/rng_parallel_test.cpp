// Counter-based RNG: known-answer values, and identical numbers whichever thread draws them.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/core/rng.hpp"
#include "attnkit/core/workspace.hpp"
#include "attnkit/ops/gemm.hpp"

namespace attnkit {
namespace {

TEST(Rng, PhiloxKnownAnswers) {
  // Known-answer vectors of Random123's philox4x32-10 (kat_vectors).
  EXPECT_EQ(philox4x32(0, {0, 0, 0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32(0xffffffffffffffffull, {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}),
            (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
}

TEST(Rng, DropoutKeepFactorsMatchScalarDecisions) {
  // The vectorised row of decisions is the scalar dropout_keep at every key: lengths with tails
  // (1, 15, 17, 100), a key offset near 2^32 (the counter wraps), p = 0.1 and 0.5.
  for (float p : {0.1f, 0.5f}) {
    for (int64_t n : {1, 15, 16, 17, 100}) {
      for (uint32_t j0 : {0u, 5u, 0xFFFFFFF0u}) {
        std::vector<float> z(size_t(n) + 1, -7.0f);  // one guard entry past the end
        dropout_keep_factors(0x1234ABCD5678EF01ull, p, 2.5f, 3, 7, 11, j0, n, z.data());
        int64_t kept = 0;
        for (int64_t k = 0; k < n; ++k) {
          const bool keep = dropout_keep(0x1234ABCD5678EF01ull, p, 3, 7, 11, j0 + uint32_t(k));
          ASSERT_EQ(z[size_t(k)], keep ? 2.5f : 0.0f) << "p " << p << " n " << n << " j0 " << j0 << " k " << k;
          kept += keep;
        }
        EXPECT_EQ(z[size_t(n)], -7.0f) << "wrote past n = " << n;
        if (n == 100) {
          EXPECT_GT(kept, 0);
        }
      }
    }
  }
}

TEST(Rng, SameNumbersOnAnyThreadCount) {
  const int64_t n = 20000;
  auto draw = [&](int threads) {
    ThreadCountScope scope(threads);
    std::vector<float> out(static_cast<size_t>(n));
    parallel_for(n, [&](int64_t i) { out[size_t(i)] = uniform_at(99, 1, 2, uint32_t(i), 3); });
    return out;
  };
  const auto one = draw(1), two = draw(2), four = draw(4);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, four);
  double mean = 0;
  for (float x : one) {
    ASSERT_GE(x, 0.0f);
    ASSERT_LT(x, 1.0f);
    mean += x;
  }
  EXPECT_NEAR(mean / n, 0.5, 0.01);  // 20000 uniforms: std of the mean ≈ 0.002
}

TEST(Parallel, RunsEveryIndexOnceAndRethrows) {
  ThreadCountScope scope(2);
  std::vector<std::atomic<int>> hits(1000);
  parallel_for(1000, [&](int64_t i) { hits[size_t(i)]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(parallel_for(10, [](int64_t i) {
                 if (i == 7) throw std::runtime_error("boom");
               }),
               std::runtime_error);
}

TEST(Parallel, DefaultThreadCountSurvivesBlasThreadScopes) {
  // OpenBLAS's OpenMP build sets OpenMP's thread count from openblas_set_num_threads: attnkit's
  // default must not follow it, or every kernel run under BlasThreadsScope(1) goes serial.
  const int before = num_threads();
  {
    BlasThreadsScope blas(1);
    EXPECT_EQ(num_threads(), before);
  }
  EXPECT_EQ(num_threads(), before);
}

TEST(Workspace, AlignsAndBoundsAllocations) {
  Workspace w;
  w.reserve(1000);
  float* a = w.alloc<float>(3);
  float* b = w.alloc<float>(5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  EXPECT_THROW(w.alloc<float>(1000), std::runtime_error);
  w.reset();
  EXPECT_EQ(w.used(), 0u);
}

}  // namespace
}  // namespace attnkit
