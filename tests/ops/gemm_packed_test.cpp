// sgemm_packed (ops/gemm.hpp): C = A·op(B) with op(B) packed once, against the float64 reference
// (sgemm_reference) on tail sizes, both layouts of B, padded row strides of A, B and C, with guard
// columns around C; one packing reused by products of different row counts; a packing repacked in
// place from new values (and a new one when the shape differs); the switch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/ops/gemm.hpp"
#include "test_random.hpp"

namespace attnkit {
namespace {

bool packed_available() {
  const PackedGemmScope on(true);
  return packed_gemm_applies(kPackedGemmRows, 64, 64);
}

// Checks rows [0, m) of C = A·op(B) (row strides lda, ldb, ldc = n + 5) against sgemm_reference
// within Higham's bound γ_{k+2}·Σ|a||b|, and that the guard columns [n, ldc) are untouched.
void expect_rows_match(bool tb, int64_t m, int64_t n, int64_t k, const std::vector<float>& a,
                       int64_t lda, const std::vector<float>& b, int64_t ldb,
                       const std::vector<float>& c, const std::vector<float>& c0, int64_t ldc) {
  std::vector<float> ref(size_t(m * ldc), 0.0f);
  sgemm_reference(false, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, ref.data(), ldc);
  const double u = std::numeric_limits<float>::epsilon() / 2;
  const double gk = double(k + 2) * u / (1 - double(k + 2) * u);
  int bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double mag = 0;
      for (int64_t p = 0; p < k; ++p)
        mag += std::fabs(double(a[size_t(i * lda + p)]) *
                         double(tb ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)]));
      const size_t at = size_t(i * ldc + j);
      if (std::fabs(double(c[at]) - double(ref[at])) > gk * mag + 1e-30 && ++bad < 4)
        ADD_FAILURE() << "tb " << tb << " " << m << "×" << n << "×" << k << " at (" << i << ", "
                      << j << "): " << c[at] << " vs " << ref[at];
    }
    for (int64_t j = n; j < ldc; ++j)
      if (std::memcmp(&c[size_t(i * ldc + j)], &c0[size_t(i * ldc + j)], sizeof(float)) != 0 && ++bad < 4)
        ADD_FAILURE() << "wrote outside C at (" << i << ", " << j << ")";
  }
}

TEST(SgemmPacked, MatchesTheFloat64ReferenceOnTailsLayoutsAndStrides) {
  if (!packed_available()) GTEST_SKIP() << "built without oneDNN";
  struct Shape {
    int64_t n, k;
  };
  for (bool tb : {false, true})
    for (const Shape s : {Shape{1, 1}, Shape{33, 47}, Shape{65, 113}, Shape{130, 688}})
      for (int64_t m : {int64_t(1), int64_t(7), int64_t(113), kPackedGemmRows}) {
        SCOPED_TRACE(::testing::Message() << "tb " << tb << " m " << m << " n " << s.n << " k " << s.k);
        const int64_t lda = s.k + 3, ldb = (tb ? s.k : s.n) + 2, ldc = s.n + 5;
        const auto a = uniform(size_t(m * lda), uint32_t(m + s.n));
        const auto b = uniform(size_t((tb ? s.n : s.k) * ldb), uint32_t(s.k));
        const auto c0 = uniform(size_t(m * ldc), 7);
        std::vector<float> c = c0;
        const auto packed = pack_gemm_b(tb, s.k, s.n, b.data(), ldb);
        sgemm_packed(m, a.data(), lda, *packed, c.data(), ldc);
        expect_rows_match(tb, m, s.n, s.k, a, lda, b, ldb, c, c0, ldc);
      }
}

TEST(SgemmPacked, OnePackingServesRowTilesOfAnyHeight) {
  if (!packed_available()) GTEST_SKIP() << "built without oneDNN";
  const int64_t m = 300, n = 96, k = 80, ldc = n + 5;  // tiles of 256 and 44 rows, and row 299 alone
  const auto a = uniform(size_t(m * k), 3), b = uniform(size_t(n * k), 4);
  const auto c0 = uniform(size_t(m * ldc), 5);
  std::vector<float> c = c0;
  const auto packed = pack_gemm_b(true, k, n, b.data(), k);
  sgemm_packed(kPackedGemmRows, a.data(), k, *packed, c.data(), ldc);
  sgemm_packed(m - 1 - kPackedGemmRows, a.data() + kPackedGemmRows * k, k, *packed,
               c.data() + kPackedGemmRows * ldc, ldc);
  sgemm_packed(1, a.data() + (m - 1) * k, k, *packed, c.data() + (m - 1) * ldc, ldc);
  expect_rows_match(true, m, n, k, a, k, b, k, c, c0, ldc);
}

TEST(SgemmPacked, RepacksIntoAPackingOfTheSameShapeOnly) {
  if (!packed_available()) GTEST_SKIP() << "built without oneDNN";
  const int64_t m = 70, n = 96, k = 80, ldc = n;
  const auto a = uniform(size_t(m * k), 8), b1 = uniform(size_t(n * k), 9), b2 = uniform(size_t(n * k), 10);
  const std::vector<float> c0(size_t(m * ldc), 0.0f);
  auto packed = pack_gemm_b(true, k, n, b1.data(), k);
  const PackedGemmB* storage = packed.get();
  // The same shape: the same packing, now holding b2 (products match b2, not b1).
  packed = pack_gemm_b(true, k, n, b2.data(), k, std::move(packed));
  EXPECT_EQ(packed.get(), storage);
  std::vector<float> c = c0;
  sgemm_packed(m, a.data(), k, *packed, c.data(), ldc);
  expect_rows_match(true, m, n, k, a, k, b2, k, c, c0, ldc);
  // Another layout of the same weight ([n, k] read untransposed is a k' = n, n' = k product): a new
  // packing, since k and n differ.
  const auto other = pack_gemm_b(false, n, k, b2.data(), k, packed);
  EXPECT_NE(other.get(), storage);
  std::vector<float> c2(size_t(m * k), 0.0f);
  const auto a2 = uniform(size_t(m * n), 11);
  sgemm_packed(m, a2.data(), n, *other, c2.data(), k);
  expect_rows_match(false, m, k, n, a2, n, b2, k, c2, std::vector<float>(c2.size(), 0.0f), k);
}

TEST(SgemmPacked, SwitchAndShapeDecideWhetherItApplies) {
  if (!packed_available()) GTEST_SKIP() << "built without oneDNN";
  {
    const PackedGemmScope off(false);
    EXPECT_FALSE(packed_gemm_applies(2048, 688, 256));
  }
  const PackedGemmScope on(true);
  EXPECT_TRUE(packed_gemm_applies(2048, 688, 256));
  EXPECT_FALSE(packed_gemm_applies(1, 688, 256));  // a decode step: the reorder would not repay
  const std::vector<float> a(size_t(2 * kPackedGemmRows) * 64), b(64 * 64);
  std::vector<float> c(size_t(2 * kPackedGemmRows) * 64);
  const auto packed = pack_gemm_b(false, 64, 64, b.data(), 64);
  EXPECT_THROW(sgemm_packed(2 * kPackedGemmRows, a.data(), 64, *packed, c.data(), 64), Error);
  // Bad strides, null or negative operands: attnkit::Error before any read.
  EXPECT_THROW(pack_gemm_b(false, 64, 64, b.data(), 63), Error);
  EXPECT_THROW(pack_gemm_b(true, 64, 32, b.data(), 63), Error);
  EXPECT_THROW(sgemm_packed(8, a.data(), 63, *packed, c.data(), 64), Error);
  EXPECT_THROW(sgemm_packed(8, a.data(), 64, *packed, c.data(), 63), Error);
  EXPECT_THROW(sgemm_packed(8, nullptr, 64, *packed, c.data(), 64), Error);
  EXPECT_THROW(sgemm_packed(-1, a.data(), 64, *packed, c.data(), 64), Error);
}

}  // namespace
}  // namespace attnkit
