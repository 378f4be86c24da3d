// gemm_bf16 (ops/gemm_bf16.hpp): against a float64 product of the bf16-rounded inputs (only float32
// accumulation left: Higham's γ_k bar), against the float64 product of the unrounded inputs
// (the bar bf16's 8-bit significand implies), every transpose, beta 0 / 1 / 0.5, tail sizes,
// strided operands with guard bands around C, 1 and 2 threads; round_to_bf16; the precision
// switch (off by default, parsing, refusal where bf16 is unavailable: run with
// ONEDNN_MAX_CPU_ISA=AVX512_CORE to take that branch on a bf16 CPU).
#include "attnkit/ops/gemm_bf16.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"
#include "ops/gemm_operands.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "test_compare.hpp"

namespace attnkit {
namespace {

constexpr double kU32 = 0x1p-24;  // unit roundoff of float32 (24-bit significand)
constexpr double kU16 = 0x1p-8;   // unit roundoff of bfloat16 (8-bit significand)

struct Bf16Case {
  bool ta, tb;
  int64_t m, n, k;
  float beta;
};

// A test case's operands (gemm_operands.hpp).
struct Bf16Operands : GemmOperands {
  Bf16Operands(const Bf16Case& cs, uint32_t seed) : GemmOperands(cs.ta, cs.tb, cs.m, cs.n, cs.k, seed) {}
};

// Σ_p |a_ip·b_pj| and |beta·C0_ij|: the magnitudes the bars scale.
double magnitude(const Bf16Case& cs, const Bf16Operands& o, int64_t i, int64_t j) {
  double mag = 0;
  for (int64_t p = 0; p < cs.k; ++p) mag += std::fabs(double(o.at_a(i, p)) * o.at_b(p, j));
  return mag;
}

// Compares gemm_bf16 with `ref` under bar(i, j, Σ|ab|, |beta·C0|), and checks the guard bands.
template <class Bar>
void expect_within(const Bf16Case& cs, const Bf16Operands& o, const std::vector<float>& c0,
                   const std::vector<float>& ref, const char* what, Bar bar) {
  int bad = 0;
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < cs.n; ++j) {
      const size_t at = size_t(i * o.ldc + j);
      const double limit = bar(magnitude(cs, o, i, j), std::fabs(double(cs.beta) * c0[at]));
      if (std::fabs(double(o.c[at]) - double(ref[at])) > limit && ++bad < 4)
        ADD_FAILURE() << what << " threads " << num_threads() << " " << cs.ta << cs.tb << " " << cs.m
                      << "×" << cs.n << "×" << cs.k << " beta " << cs.beta << " at (" << i << ", " << j
                      << "): " << o.c[at] << " vs " << ref[at] << " (bar " << limit << ")";
    }
    for (int64_t j = cs.n; j < o.ldc; ++j)  // guard band: never written
      if (std::memcmp(&o.c[size_t(i * o.ldc + j)], &c0[size_t(i * o.ldc + j)], sizeof(float)) != 0 &&
          ++bad < 4)
        ADD_FAILURE() << what << " wrote outside C at (" << i << ", " << j << ")";
  }
}

// The float64 product of the unrounded inputs.
std::vector<float> exact_product(const Bf16Case& cs, const Bf16Operands& o, const std::vector<float>& c0) {
  std::vector<float> ref = c0;
  sgemm_reference(cs.ta, cs.tb, cs.m, cs.n, cs.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, cs.beta,
                  ref.data(), o.ldc);
  return ref;
}

void expect_matches_references(const Bf16Case& cs) {
  Bf16Operands o(cs, uint32_t(cs.m * 7 + cs.n * 3 + cs.k));
  const std::vector<float> c0 = o.c;
  std::vector<float> rounded = c0;
  gemm_bf16_reference(cs.ta, cs.tb, cs.m, cs.n, cs.k, o.a.data(), o.lda, o.b.data(), o.ldb, cs.beta,
                      rounded.data(), o.ldc);
  const std::vector<float> exact = exact_product(cs, o, c0);
  gemm_bf16(cs.ta, cs.tb, cs.m, cs.n, cs.k, o.a.data(), o.lda, o.b.data(), o.ldb, cs.beta, o.c.data(),
            o.ldc);
  // bf16·bf16 products are exact in float32 (8 + 8 significand bits): what is left is the float32
  // sum of k terms, beta·C and the final rounding: γ_{k+3} = (k + 3)·u32 / (1 - (k + 3)·u32).
  const double gk = double(cs.k + 3) * kU32 / (1 - double(cs.k + 3) * kU32);
  expect_within(cs, o, c0, rounded, "vs bf16-rounded float64",
                [&](double mag, double prior) { return gk * (mag + prior) + 1e-30; });
  // Each input carries a relative error of at most u16 = 2^-8, so each product one of at most
  // (1 + u16)² - 1 = 2·u16 + u16²; then the float32 sum as above.
  const double input = 2 * kU16 + kU16 * kU16;
  expect_within(cs, o, c0, exact, "vs float64",
                [&](double mag, double prior) { return (input + gk) * mag + gk * prior + 1e-30; });
}

TEST(GemmBf16, MatchesTheRoundedAndUnroundedFloat64ReferencesOnTailsTransposesBeta) {
  if (!gemm_bf16_available()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  const int64_t sizes[] = {1, 7, 65, 113};
  std::optional<ThreadCountScope> one(1);  // small products: 1 thread (2 below)
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : sizes)
        for (int64_t n : sizes)
          for (int64_t k : {int64_t(1), int64_t(17), int64_t(130)}) {
            if (m != n && k == 17) continue;  // tails in k: on the square cases
            expect_matches_references({ta, tb, m, n, k, 0.0f});
            if (m == n) expect_matches_references({ta, tb, m, n, k, m == 7 ? 0.5f : 1.0f});
          }
  one.reset();
  for (int threads : {1, 2}) {
    ThreadCountScope scope(threads);
    // GPT-like linear products: forward, d_x and the accumulated d_W (k = T)
    expect_matches_references({false, true, 256, 192, 256, 0.0f});
    expect_matches_references({false, false, 256, 128, 344, 0.0f});
    expect_matches_references({true, false, 128, 344, 256, 1.0f});
  }
}

// The products really are bf16 (not a float32 path in disguise): on random data the largest error
// against the unrounded float64 product is far above float32's and of bf16's order.
TEST(GemmBf16, ErrorIsThatOfBf16InputsNotFloat32) {
  if (!gemm_bf16_available()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  const Bf16Case cs{false, true, 64, 64, 256, 0.0f};
  Bf16Operands o(cs, 11);
  const std::vector<float> c0 = o.c, exact = exact_product(cs, o, c0);
  gemm_bf16(cs.ta, cs.tb, cs.m, cs.n, cs.k, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f, o.c.data(), o.ldc);
  double worst = 0;  // largest |error| / Σ|ab|
  for (int64_t i = 0; i < cs.m; ++i)
    for (int64_t j = 0; j < cs.n; ++j)
      worst = worse_error(worst, std::fabs(double(o.c[size_t(i * o.ldc + j)]) - exact[size_t(i * o.ldc + j)]) /
                                  magnitude(cs, o, i, j));
  EXPECT_GT(worst, 16 * 256 * kU32);  // above any float32 rounding of a 256-term sum
  EXPECT_LT(worst, 2 * kU16);
}

TEST(GemmBf16, SizeZeroAndBadStrides) {
  if (!gemm_bf16_available()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  std::vector<float> a(6, 1.0f), b(6, 1.0f), c = {2.0f, 2.0f, 2.0f, 2.0f};
  gemm_bf16(false, false, 2, 2, 0, a.data(), 1, b.data(), 2, 0.5f, c.data(), 2);  // k = 0: C = beta·C
  EXPECT_EQ(c, std::vector<float>({1.0f, 1.0f, 1.0f, 1.0f}));
  EXPECT_THROW(gemm_bf16(false, false, 2, 2, 3, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2), Error);
  EXPECT_THROW(gemm_bf16(false, false, -1, 2, 3, a.data(), 3, b.data(), 2, 0.0f, c.data(), 2), Error);
  EXPECT_THROW(gemm_bf16(false, false, 2, 2, 0, a.data(), 1, b.data(), 2, 0.5f, c.data(), 1), Error);
  EXPECT_THROW(gemm_bf16(false, false, 2, 2, 3, nullptr, 3, b.data(), 2, 0.0f, c.data(), 2), Error);
  EXPECT_EQ(c, std::vector<float>({1.0f, 1.0f, 1.0f, 1.0f}));  // refused calls wrote nothing
}

TEST(GemmBf16, RoundToBf16IsNearestEven) {
  const auto bits = [](uint32_t u) { return std::bit_cast<float>(u); };
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_to_bf16(bits(0x3f808000u)), bits(0x3f800000u));  // tie, even below
  EXPECT_EQ(round_to_bf16(bits(0x3f818000u)), bits(0x3f820000u));  // tie, even above
  EXPECT_EQ(round_to_bf16(bits(0x3f808001u)), bits(0x3f810000u));  // above the tie
  EXPECT_EQ(round_to_bf16(-bits(0x3f807fffu)), -1.0f);
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_to_bf16(-std::numeric_limits<float>::infinity()), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_to_bf16(bits(0x7f800001u))));  // signalling NaN stays NaN, not inf
}

TEST(MatmulPrecision, IsF32ByDefaultAndParses) {
  EXPECT_EQ(matmul_precision(), MatmulPrecision::kF32);
  EXPECT_EQ(parse_matmul_precision("f32"), MatmulPrecision::kF32);
  EXPECT_EQ(parse_matmul_precision("bf16"), MatmulPrecision::kBf16);
  EXPECT_STREQ(matmul_precision_name(MatmulPrecision::kBf16), "bf16");
  EXPECT_THROW(parse_matmul_precision("fp16"), Error);
  EXPECT_THROW(parse_matmul_precision(""), Error);
}

TEST(MatmulPrecision, ScopeSetsAndRestoresOrRefusesWithoutBf16) {
  if (!gemm_bf16_available()) {
    EXPECT_THROW(set_matmul_precision(MatmulPrecision::kBf16), Error);
    EXPECT_EQ(matmul_precision(), MatmulPrecision::kF32);
    std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4, 0.0f);
    EXPECT_THROW(gemm_bf16(false, false, 2, 2, 2, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2), Error);
    EXPECT_TRUE(gemm_bf16_implementation().empty());
    return;
  }
  EXPECT_FALSE(gemm_bf16_implementation().empty());
  {
    const MatmulPrecisionScope bf16(MatmulPrecision::kBf16);
    EXPECT_EQ(matmul_precision(), MatmulPrecision::kBf16);
  }
  EXPECT_EQ(matmul_precision(), MatmulPrecision::kF32);
}

}  // namespace
}  // namespace attnkit
