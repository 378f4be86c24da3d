// The flash packed tile kernels (src/attention/flash_tile_kernels.hpp) against double loops on
// the same inputs: packing, S = Q·Kᵀ on panel-packed rows against the forward's and the
// backward's key ranges, the forward's O += P·V, C += Pᵀ·B and C += P·B, and the exponentials, on sizes that hit every tail
// (rows not a multiple of the row block, keys not a multiple of the key panel, D not a multiple
// of the vector width) and key ranges that start inside the packed sequence.
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

TEST(FlashTileKernels, PackedKeysFollowTheLayout) {
  // Kᵀ panels: K[j, e] at ((j / NK)·D + e)·NK + j % NK, keys past s zero (the register
  // transposes of 8 × 8 blocks and the one-by-one rest alike).
  for (int64_t d : {1, 7, 8, 20, 24, 33, 128})
    for (int64_t s : {1, 7, 8, 17, 33, 70}) {
      const int64_t ld = d + 5;
      const auto k = randn(s * ld, 4);
      Buffer kp(packed_keys_size(s, d));
      std::fill(kp.p, kp.p + kp.n, -1.0f);
      pack_keys(k.data(), ld, s, d, kp.p);
      int bad = 0;
      for (int64_t j = 0; j < round_up(s, kKeyPanel); ++j)
        for (int64_t e = 0; e < d; ++e) {
          const float want = j < s ? k[size_t(j * ld + e)] : 0.0f;
          const float got = kp.p[((j / kKeyPanel) * d + e) * kKeyPanel + j % kKeyPanel];
          if (got != want && ++bad < 4) ADD_FAILURE() << "d " << d << " s " << s << " K[" << j << ", " << e << "]: " << got << " vs " << want;
        }
    }
}

TEST(FlashTileKernels, ScoresAndValuesMatchDoubleLoops) {
  for (int64_t d : {1, 7, 16, 20, 33, 48, 96, 128})
    for (int64_t rows : {int64_t{1}, kRowBlock - 1, kRowBlock + 1, 2 * kRowBlock + 5})
      for (auto [s, j0, n] : {std::tuple<int64_t, int64_t, int64_t>{5, 0, 5}, {70, 32, 38},
                              {130, 64, 63}, {200, 0, 200}}) {
        const int64_t ld = d + 3;  // strided K and V rows
        const auto q = randn(rows * d, 1), k = randn(s * ld, 2), v = randn(s * ld, 3);
        const int64_t rb = round_up(rows, kRowBlock), dp = padded_dim(d);
        Buffer qp(rb * dp), kp(packed_keys_size(s, d)), vp(packed_values_size(s, d));
        Buffer sc(rb * kScoreStride), o(rows * dp);
        std::fill(qp.p, qp.p + qp.n, 0.0f);  // the forward's query panels: pad rows zero
        for (int64_t r = 0; r < rows; ++r)
          pack_panel_row(q.data() + r * d, 1.0f, d, qp.p + r * kValuePanel, rb * kValuePanel);
        pack_keys(k.data(), ld, s, d, kp.p);
        pack_values(v.data(), ld, s, d, vp.p);
        tile_scores_panels(qp.p, rb * kValuePanel, rows, kp.p + j0 * d, n, d, sc.p, kScoreStride);
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

// Bar: float32 sums of m terms err by about sqrt(m)·2^-24·Σ|term|; allow 8x that.
double sum_bar(int64_t m, double abs_sum) { return 8 * std::sqrt(double(m)) * 0x1p-24 * abs_sum; }

TEST(FlashTileKernels, BackwardProductsMatchDoubleLoops) {
  constexpr int64_t ls = kBwdScoreStride;
  for (int64_t d : {1, 7, 16, 20, 33, 96, 128})
    for (int64_t rows : {int64_t{1}, kRowBlock - 1, kRowBlock + 1, 2 * kRowBlock + 5, int64_t{250}})
      for (int64_t n : {int64_t{5}, int64_t{38}, int64_t{63}, FlashTiles::kBwdKeyTile}) {
        const int64_t ld = d + 3, dp = padded_dim(d), rb = round_up(rows, kRowBlock);
        const int64_t stride = (rb + 2) * kValuePanel;  // a panel stride wider than the rows
        const auto a = randn(rows * ld, 5), k = randn(n * ld, 6), p = randn(rb * ls, 7);
        Buffer ap(stride * (dp / kValuePanel)), kp(packed_keys_size(n, d)), s(rb * ls);
        Buffer kc(packed_values_size(n, d)), dk(round_up(n, kRowBlock) * dp), dq(rb * dp);
        std::fill(ap.p, ap.p + ap.n, 0.0f);
        const float factor = 0.75f;
        for (int64_t r = 0; r < rows; ++r)
          pack_panel_row(a.data() + r * ld, factor, d, ap.p + r * kValuePanel, stride);
        pack_keys(k.data(), ld, n, d, kp.p);
        pack_values(k.data(), ld, n, d, kc.p);
        tile_scores_panels(ap.p, stride, rows, kp.p, n, d, s.p, ls);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0, mag = 0;
            for (int64_t e = 0; e < d; ++e) {
              const double t = double(factor * a[size_t(r * ld + e)]) * k[size_t(j * ld + e)];
              ref += t;
              mag += std::abs(t);
            }
            ASSERT_NEAR(s.p[r * ls + j], ref, sum_bar(d, mag))
                << "scores d=" << d << " rows=" << rows << " n=" << n << " r=" << r << " j=" << j;
          }
        // dK += Pᵀ·A over the first n columns of p, and dQ += P·K, both onto random contents.
        const auto dk0 = randn(round_up(n, kRowBlock) * dp, 8), dq0 = randn(rb * dp, 9);
        std::copy(dk0.begin(), dk0.end(), dk.p);
        std::copy(dq0.begin(), dq0.end(), dq.p);
        std::copy(p.begin(), p.end(), s.p);
        tile_accumulate_transposed(s.p, n, rows, ap.p, stride, d, dk.p, dp);
        tile_accumulate_rows(s.p, rows, kc.p, n * kValuePanel, n, d, dq.p, dp);
        for (int64_t j = 0; j < round_up(n, kRowBlock); ++j)
          for (int64_t e = 0; e < dp; ++e) {
            double ref = dk0[size_t(j * dp + e)], mag = std::abs(ref);
            for (int64_t r = 0; r < rows && j < n && e < d; ++r) {
              const double t = double(p[size_t(r * ls + j)]) * (factor * a[size_t(r * ld + e)]);
              ref += t;
              mag += std::abs(t);
            }
            ASSERT_NEAR(dk.p[j * dp + e], ref, sum_bar(rows + 1, mag))
                << "transposed d=" << d << " rows=" << rows << " n=" << n << " j=" << j
                << " e=" << e;
          }
        for (int64_t r = 0; r < rb; ++r)
          for (int64_t e = 0; e < dp; ++e) {
            double ref = dq0[size_t(r * dp + e)], mag = std::abs(ref);
            for (int64_t j = 0; j < n && r < rows && e < d; ++j) {
              const double t = double(p[size_t(r * ls + j)]) * k[size_t(j * ld + e)];
              ref += t;
              mag += std::abs(t);
            }
            ASSERT_NEAR(dq.p[r * dp + e], ref, sum_bar(n + 1, mag))
                << "rows d=" << d << " rows=" << rows << " n=" << n << " r=" << r << " e=" << e;
          }
        for (const Buffer* b : {&ap, &kp, &s, &kc, &dk, &dq}) EXPECT_TRUE(b->intact()) << "d=" << d;
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
