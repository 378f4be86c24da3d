// The flash forward's packed tile kernels (src/attention/flash_tile_kernels.hpp) against double
// loops on the same inputs: packing, S = Q·Kᵀ, O += P·V and the exponentials, on sizes that hit
// every tail (rows not a multiple of the row block, keys not a multiple of the key panel, D not
// a multiple of the vector width) and a key range that starts inside the packed sequence.
#include "attention/flash_tile_kernels.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace attnkit::flash {
namespace {

// 64-byte-aligned floats with a guard band after the n elements, checked by intact().
struct Buffer {
  static constexpr int64_t kGuard = 64;
  static constexpr float kMark = 1234.5f;
  std::vector<float> raw;
  float* p;
  int64_t n;
  explicit Buffer(int64_t size) : raw(size_t(size + kGuard + 16), kMark), n(size) {
    p = raw.data();
    while (reinterpret_cast<uintptr_t>(p) % 64) ++p;
  }
  bool intact() const {
    for (int64_t i = n; i < n + kGuard; ++i)
      if (p[i] != kMark) return false;
    return true;
  }
};

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  return x;
}

TEST(FlashTileKernels, ScoresAndValuesMatchDoubleLoops) {
  for (int64_t d : {1, 7, 16, 20, 33, 48, 96, 128})
    for (int64_t rows : {int64_t{1}, kRowBlock - 1, kRowBlock + 1, 2 * kRowBlock + 5})
      for (auto [s, j0, n] : {std::tuple<int64_t, int64_t, int64_t>{5, 0, 5}, {70, 32, 38},
                              {130, 64, 63}, {200, 0, 200}}) {
        const int64_t ld = d + 3;  // strided K and V rows
        const auto q = randn(rows * d, 1), k = randn(s * ld, 2), v = randn(s * ld, 3);
        const int64_t rb = round_up(rows, kRowBlock), dp = padded_dim(d);
        Buffer qp(rb * d), kp(packed_keys_size(s, d)), vp(packed_values_size(s, d));
        Buffer sc(rb * kScoreStride), o(rows * dp);
        pack_queries(q.data(), rows, d, qp.p);
        pack_keys(k.data(), ld, s, d, kp.p);
        pack_values(v.data(), ld, s, d, vp.p);
        tile_scores(qp.p, rows, kp.p + j0 * d, n, d, sc.p);
        // Bar: float32 sums of m terms err by about sqrt(m)·2^-24·Σ|term|; allow 8x that.
        auto bar = [](int64_t m, double abs_sum) { return 8 * std::sqrt(double(m)) * 0x1p-24 * abs_sum; };
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0, mag = 0;
            for (int64_t e = 0; e < d; ++e) {
              const double t = double(q[r * d + e]) * k[(j0 + j) * ld + e];
              ref += t;
              mag += std::abs(t);
            }
            ASSERT_NEAR(sc.p[r * kScoreStride + j], ref, bar(d, mag))
                << "scores d=" << d << " rows=" << rows << " n=" << n << " r=" << r << " j=" << j;
          }
        std::vector<float> o0 = randn(rows * dp, 4);
        std::copy(o0.begin(), o0.end(), o.p);
        tile_accumulate(sc.p, rows, vp.p, s, j0, n, d, o.p);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t e = 0; e < d; ++e) {
            double ref = o0[size_t(r * dp + e)], mag = std::abs(ref);
            for (int64_t j = 0; j < n; ++j) {
              const double t = double(sc.p[r * kScoreStride + j]) * v[(j0 + j) * ld + e];
              ref += t;
              mag += std::abs(t);
            }
            ASSERT_NEAR(o.p[r * dp + e], ref, bar(n + 1, mag))
                << "values d=" << d << " rows=" << rows << " n=" << n << " r=" << r << " e=" << e;
          }
        for (const Buffer* b : {&qp, &kp, &vp, &sc, &o}) EXPECT_TRUE(b->intact()) << "d=" << d;
      }
}

TEST(FlashTileKernels, ExpSumMatchesDoubleWithinTwoUlp) {
  for (int64_t n : {1, 15, 16, 17, 100, 1000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) x[size_t(j)] = -70.0f * float(j) / float(n) + 3.0f;  // 3 to -67
    if (n > 3) x[2] = -std::numeric_limits<float>::infinity();  // a masked score
    const float m = 3.5f;
    std::vector<float> y = x;
    const float sum = tile_exp_sum(y.data(), n, m);
    double ref_sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double t = double(x[size_t(j)] - m);  // the float32 difference, as any kernel has it
      const double ref = t < -64 ? 0 : std::exp(t);
      ref_sum += ref;
      if (ref == 0)
        EXPECT_EQ(y[size_t(j)], 0.0f) << "n=" << n << " j=" << j;
      else
        EXPECT_NEAR(y[size_t(j)], ref, 2.5e-7 * ref) << "n=" << n << " j=" << j << " t=" << t;
    }
    EXPECT_NEAR(sum, ref_sum, 1e-6 * ref_sum) << "n=" << n;
  }
}

}  // namespace
}  // namespace attnkit::flash
