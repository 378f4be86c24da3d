// ALiBi (per-head linear biases, FlashAttention's convention) from first principles: the bias
// against its closed form, gradients of the reference and of the flash backward against finite
// differences in double, the naive baseline against the reference, decode with ALiBi against its
// reference and against flash attention over the history, and the errors that name
// alibi_slopes. The flash forward/backward grid with ALiBi is in flash_attention_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "attention/attention_problem.hpp"
#include "attnkit/attention/attention_naive.hpp"
#include "attnkit/attention/attention_reference.hpp"
#include "attnkit/attention/decode.hpp"
#include "attnkit/attention/flash_attention.hpp"
#include "attnkit/core/error.hpp"
#include "test_errors.hpp"
#include "test_random.hpp"
#include "test_compare.hpp"

namespace attnkit {
namespace {

using testing::Problem;
using testing::ProblemShape;

// With q = 0 every score is 0, so P_ij = exp(-m|i + Lk - Lq - j|) / Σ_j'; v = one-hot rows of
// length Lk make out[i, h, :] = P_i. Checks sign, alignment (bottom-right) and per-head slopes.
TEST(Alibi, ReferenceBiasMatchesClosedForm) {
  for (auto [lq, lk, causal] : {std::tuple{5, 9, false}, {9, 5, false}, {6, 6, true}}) {
    const int64_t h = 2;
    Problem p({{lq}, {lk}, h, 1, lk, false, 0, 1}, 3);
    std::fill_n(p.q.data(), p.q.size(), 0.0f);
    for (int64_t j = 0; j < lk; ++j)
      for (int64_t e = 0; e < lk; ++e) p.v.data()[j * lk + e] = j == e ? 1.0f : 0.0f;
    const AttentionOptions o = causal ? AttentionOptions::causal() : AttentionOptions{};
    auto a = p.args();
    attention_reference(o, a);
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t hh = 0; hh < h; ++hh) {
        const double m = p.slopes[size_t(hh)];
        const KeyRange vis = visible_keys(o, i, lq, lk);
        double sum = 0;
        for (int64_t j = vis.lo; j < vis.hi; ++j) sum += std::exp(-m * std::abs(i + lk - lq - j));
        for (int64_t j = 0; j < lk; ++j) {
          const bool seen = j >= vis.lo && j < vis.hi;
          const double want = seen ? std::exp(-m * std::abs(i + lk - lq - j)) / sum : 0.0;
          EXPECT_NEAR(a.out(i, hh, j), want, 1e-7) << "lq=" << lq << " lk=" << lk << " i=" << i;
        }
        if (vis.hi > vis.lo) {
          EXPECT_NEAR(a.lse(hh, i), std::log(sum), 1e-6);
        }
      }
  }
}

// Worst |analytic - numeric| over q, k, v (and sinks) and the scale of the numeric gradient, for
// the gradients already in p (d_q, d_k, d_v, d_sink). Central differences, step what float moved.
std::pair<double, double> gradient_error(Problem& p, const AttentionOptions& o) {
  auto numeric = [&](float* x) { return testing::reference_numeric_grad(p, o, x); };
  const std::vector<float> dq(p.d_q.data(), p.d_q.data() + p.d_q.size()),
      dk(p.d_k.data(), p.d_k.data() + p.d_k.size()), dv(p.d_v.data(), p.d_v.data() + p.d_v.size()),
      ds = p.d_sink;
  double worst = 0, scale = 0;
  auto sweep = [&](testing::Guarded& x, const std::vector<float>& g) {
    for (int64_t i = 0; i < x.size(); ++i) {
      const double num = numeric(&x.data()[i]);
      worst = worse_error(worst, std::abs(num - g[size_t(i)]));
      scale = std::max(scale, std::abs(num));
    }
  };
  sweep(p.q, dq);
  sweep(p.k, dk);
  sweep(p.v, dv);
  for (size_t h = 0; h < p.sinks.size(); ++h) {
    const double num = numeric(&p.sinks[h]);
    worst = worse_error(worst, std::abs(num - ds[h]));
    scale = std::max(scale, std::abs(num));
  }
  return {worst, scale};
}

struct GradCase {
  const char* name;
  ProblemShape shape;
  AttentionOptions opts;
};

// Both backwards (reference in double, flash in float32) against finite differences of the
// double reference forward, on tiny shapes.
TEST(Alibi, GradientsMatchFiniteDifferences) {
  const GradCase cases[] = {
      {"mha", {{5}, {5}, 2, 2, 4, false, 0, 1}, {}},
      {"gqa causal lq<lk", {{4}, {7}, 4, 2, 3, false, 0, 1}, AttentionOptions::causal()},
      {"mqa lq>lk", {{6}, {3}, 3, 1, 4, false, 0, 1}, {}},
      {"window softcap sinks", {{7}, {7}, 2, 1, 3, true, 0, 1},
       {.window_left = 2, .window_right = 1, .softcap = 1.5f}},
      {"[B,H] varlen empty", {{3, 0, 4}, {2, 3, 4}, 2, 1, 3, true, 0, 2}, AttentionOptions::causal()},
  };
  for (const auto& c : cases)
    for (const bool flash : {false, true}) {
      Problem p(c.shape, 7);
      if (flash) {
        flash_attention(c.opts, p.args());
        flash_attention_backward(c.opts, p.args(), p.grads());
      } else {
        attention_reference_backward(c.opts, p.args(), p.grads());
      }
      ASSERT_TRUE(p.guards_intact()) << c.name;
      const auto [worst, scale] = gradient_error(p, c.opts);
      // h = 1e-2 on float inputs: truncation O(h²) plus float rounding of out (~1e-7) over 2h
      // bound the difference near 1e-4 of the gradient's scale; flash adds float32 rounding.
      EXPECT_LT(worst, 2e-3 * std::max(1.0, scale)) << c.name << (flash ? " flash" : " reference");
    }
}

// The naive baseline (what `bench attention` compares against) with ALiBi equals the reference
// up to float32 rounding (bar as in flash_attention_test.cpp: 64·sqrt(n)·2^-24 of the scale).
TEST(Alibi, NaiveMatchesReference) {
  const GradCase cases[] = {
      {"gqa causal lq<lk", {{17}, {65}, 4, 2, 16, false, 0, 1}, AttentionOptions::causal()},
      {"mqa lq>lk softcap", {{65}, {17}, 4, 1, 16, false, 0, 1}, {.softcap = 2.0f}},
      {"[B,H] varlen sinks", {{0, 7, 33}, {5, 7, 40}, 4, 2, 16, true, 0, 2}, {}},
  };
  for (const auto& c : cases) {
    Problem ref(c.shape, 9), naive(c.shape, 9);
    attention_reference(c.opts, ref.args());
    attention_naive(c.opts, naive.args());
    ASSERT_TRUE(naive.guards_intact()) << c.name;
    const double tol = 64 * std::sqrt(65.0 * 16) * 0x1p-24;
    for (auto [x, y] : {std::pair{&naive.out, &ref.out}, {&naive.lse, &ref.lse}}) {
      const double scale = std::max(1.0, testing::max_abs(y->data(), y->size()));
      EXPECT_LE(testing::max_abs_diff(x->data(), y->data(), x->size()), tol * scale) << c.name;
    }
  }
}

template <class F>
void expect_error_naming(F&& f, const std::string& what, const char* context) {
  SCOPED_TRACE(context);
  expect_error(f, what);
}

TEST(Alibi, RejectsBadSlopes) {
  Problem p({{3, 4}, {3, 4}, 4, 2, 8}, 1);  // two sequences, H = 4: [4] or [2, 4] accepted
  for (const size_t n : {size_t(3), size_t(12)}) {
    const std::vector<float> slopes(n, 0.5f);
    auto a = p.args();
    a.alibi_slopes = slopes;
    expect_error_naming([&] { flash_attention({}, a); }, "alibi_slopes", "size");
    expect_error_naming([&] { attention_reference({}, a); }, "alibi_slopes", "size");
  }
  for (const float bad : {NAN, INFINITY}) {
    std::vector<float> slopes(8, 0.5f);
    slopes[5] = bad;
    auto a = p.args();
    a.alibi_slopes = slopes;
    expect_error_naming([&] { flash_attention({}, a); }, "alibi_slopes: must be finite", "nan");
  }
  for (const size_t n : {size_t(4), size_t(8)}) {
    const std::vector<float> slopes(n, 0.5f);
    auto a = p.args();
    a.alibi_slopes = slopes;
    EXPECT_NO_THROW(flash_attention({}, a)) << n;
  }
}

// Decode: B = 2 sequences of different lengths (one spans two split-KV chunks), n new queries.
struct DecodeSetup {
  int64_t h = 8, hkv = 2, d = 32;
  std::vector<int64_t> lens{700, 37};
  KVCache cache;
  std::vector<float> k, v;
  std::vector<int64_t> seqs;

  explicit DecodeSetup(DType dt)
      : cache({.kv_heads = 2, .head_dim = 32, .capacity = 700, .dtype = dt, .max_sequences = 2}),
        k(randn(737 * 2 * 32, 41)), v(randn(737 * 2 * 32, 42)) {
    int64_t at = 0;
    for (const int64_t len : lens) {
      seqs.push_back(cache.add_sequence());
      cache.append(seqs.back(), 0, ConstView3::contiguous(k.data() + at * hkv * d, {len, hkv, d}),
                   ConstView3::contiguous(v.data() + at * hkv * d, {len, hkv, d}));
      at += len;
    }
  }

  // out [B·n, H, D] and lse [H, B·n] of the fast path or the reference.
  std::pair<std::vector<float>, std::vector<float>> run(bool fast, const DecodeOptions& o,
                                                        const std::vector<float>& q,
                                                        std::span<const float> slopes) const {
    const int64_t rows = int64_t(q.size()) / (h * d);
    std::vector<float> out(q.size()), lse(static_cast<size_t>(h * rows));
    const DecodeArgs a{.q = ConstView3::contiguous(q.data(), {rows, h, d}), .seqs = seqs,
                       .cache = &cache, .alibi_slopes = slopes,
                       .out = View3::contiguous(out.data(), {rows, h, d}),
                       .lse = View2::contiguous(lse.data(), {h, rows})};
    (fast ? decode_attention : decode_attention_reference)(o, a);
    return {out, lse};
  }
};

std::vector<float> decode_slopes(int64_t rows, int64_t h) {
  std::vector<float> s;
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t hh = 0; hh < h; ++hh) s.push_back(std::exp2(-float(hh + 1)) * float(1 + b));
  return s;
}

TEST(Alibi, DecodeMatchesItsReferenceForEachCacheDtype) {
  for (const DType dt : {DType::f32, DType::f16, DType::i8}) {
    const DecodeSetup s(dt);
    for (const int64_t n : {1, 3})
      for (const int64_t rows : {1, 2}) {  // [H] and [B, H] slopes
        const auto q = randn(2 * n * s.h * s.d, uint32_t(50 + n));
        const auto slopes = decode_slopes(rows, s.h);
        for (const auto& opts : {AttentionOptions::causal(), AttentionOptions{.softcap = 2.0f},
                                 AttentionOptions{.window_left = 100, .window_right = 0}}) {
          const auto [out, lse] = s.run(true, {.attention = opts}, q, slopes);
          const auto [ref_out, ref_lse] = s.run(false, {.attention = opts}, q, slopes);
          const std::string what = std::string(dtype_name(dt)) + " n=" + std::to_string(n) +
                                   " slope rows=" + std::to_string(rows);
          // Same stored values on both sides: float32 rounding only (as decode_test.cpp).
          EXPECT_LT(testing::max_abs_diff(out.data(), ref_out.data(), int64_t(out.size())), 2e-6) << what;
          EXPECT_LT(testing::max_abs_diff(lse.data(), ref_lse.data(), int64_t(lse.size())), 2e-5) << what;
        }
        // ALiBi changes the result (the comparison above is not of two unbiased runs).
        const auto [plain, unused] = s.run(true, {}, q, {});
        const auto [biased, unused2] = s.run(true, {}, q, slopes);
        EXPECT_GT(testing::max_abs_diff(plain.data(), biased.data(), int64_t(plain.size())), 1e-2);
      }
  }
}

// Decode of the last n tokens with [B, H] slopes equals flash attention over each history with
// that sequence's [H] row (dense f32 cache: the same numbers on both sides).
TEST(Alibi, DecodeEqualsFlashAttentionOverTheHistory) {
  const DecodeSetup s(DType::f32);
  const int64_t n = 2;
  const auto q = randn(2 * n * s.h * s.d, 61);
  const auto slopes = decode_slopes(2, s.h);
  const auto [out, lse] = s.run(true, {}, q, slopes);
  int64_t at = 0;
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t len = s.lens[size_t(b)];
    std::vector<float> want(size_t(n * s.h * s.d)), want_lse(size_t(s.h * n));
    flash_attention(AttentionOptions::causal(),
                    {.q = ConstView3::contiguous(q.data() + b * n * s.h * s.d, {n, s.h, s.d}),
                     .k = ConstView3::contiguous(s.k.data() + at * s.hkv * s.d, {len, s.hkv, s.d}),
                     .v = ConstView3::contiguous(s.v.data() + at * s.hkv * s.d, {len, s.hkv, s.d}),
                     .alibi_slopes = std::span<const float>(slopes).subspan(size_t(b * s.h), size_t(s.h)),
                     .out = View3::contiguous(want.data(), {n, s.h, s.d}),
                     .lse = View2::contiguous(want_lse.data(), {s.h, n})});
    at += len;
    EXPECT_LT(testing::max_abs_diff(out.data() + b * n * s.h * s.d, want.data(), int64_t(want.size())), 2e-6);
    for (int64_t hh = 0; hh < s.h; ++hh)
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(lse[size_t(hh * 2 * n + b * n + i)], want_lse[size_t(hh * n + i)], 2e-5);
  }
}

TEST(Alibi, DecodeRejectsBadSlopes) {
  const DecodeSetup s(DType::f32);
  const auto q = randn(2 * s.h * s.d, 71);
  for (auto slopes : {std::vector<float>(7, 0.5f), std::vector<float>(24, 0.5f),
                      std::vector<float>(8, NAN)})
    for (const bool fast : {true, false})
      expect_error_naming([&] { s.run(fast, {}, q, slopes); }, "alibi_slopes", "decode");
}

}  // namespace
}  // namespace attnkit
