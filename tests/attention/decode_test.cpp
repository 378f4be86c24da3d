// Decode attention against flash attention over the full history (dense), against attention over
// exactly the sink + window tokens at cache positions (sink policy, through ring wrap-around),
// paged against dense for interleaved sequences, storage dtypes within their rounding bounds.
#include "attnkit/attention/decode.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention/attention_problem.hpp"
#include "test_errors.hpp"
#include "attnkit/attention/attention_reference.hpp"
#include "attnkit/attention/flash_attention.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/rope.hpp"
#include "test_random.hpp"

namespace attnkit {
namespace {


struct Decoded {
  std::vector<float> out, lse;
};

Decoded run(bool fast, const DecodeOptions& o, const KVCache& cache, std::span<const int64_t> seqs,
            const std::vector<float>& q, int64_t h, int64_t d, std::span<const float> sinks = {}) {
  const int64_t rows = int64_t(q.size()) / (h * d);
  Decoded r{std::vector<float>(q.size()), std::vector<float>(static_cast<size_t>(h * rows))};
  DecodeArgs a{.q = ConstView3::contiguous(q.data(), {rows, h, d}), .seqs = seqs, .cache = &cache,
               .layer = 0, .sink_logits = sinks,
               .out = View3::contiguous(r.out.data(), {rows, h, d}),
               .lse = View2::contiguous(r.lse.data(), {h, rows})};
  (fast ? decode_attention : decode_attention_reference)(o, a);
  return r;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  return testing::max_abs_diff(a.data(), b.data(), int64_t(a.size()));
}

// One sequence of `len` random cached tokens (Hkv heads of width D; random K, V and queries from
// seeds seed, seed + 1, seed + 2) and n queries of H heads.
struct OneSequence {
  int64_t h, hkv, d, n, len;
  uint32_t seed;
};
// Fills a cache per storage dtype in `dtypes` with the same random K and V, and decodes p's
// queries with each option set in `opts`: by the reference once, and by the kernels once per
// reading order in `orders` (a DecodePageOrderScope each). Expects every kernel result to equal
// the reference to float32 rounding. The data and the reference are shared: neither depends on
// the reading order, and drawing the data is most of the time.
void expect_decode_equals_reference(const OneSequence& p, std::span<const DType> dtypes,
                                    std::span<const DecodeOptions> opts,
                                    std::span<const bool> orders, const std::string& what) {
  const int64_t h = p.h, hkv = p.hkv, d = p.d, len = p.len;
  const auto k = randn(len * hkv * d, p.seed), v = randn(len * hkv * d, p.seed + 1),
             q = randn(p.n * h * d, p.seed + 2);
  const std::vector<int64_t> seqs{0};
  for (const DType dt : dtypes) {
    KVCache c({.kv_heads = hkv, .head_dim = d, .capacity = len, .dtype = dt});
    c.add_sequence();
    c.append(0, 0, ConstView3::contiguous(k.data(), {len, hkv, d}),
             ConstView3::contiguous(v.data(), {len, hkv, d}));
    for (const DecodeOptions& o : opts) {
      const auto ref = run(false, o, c, seqs, q, h, d);
      for (const bool page_order : orders) {
        const DecodePageOrderScope order(page_order);
        const auto fast = run(true, o, c, seqs, q, h, d);
        const std::string which = what + " " + std::string(dtype_name(dt)) +
                                  (page_order ? " page order" : " address order") +
                                  " window=" + std::to_string(o.attention.window_left) +
                                  " rope=" + std::to_string(o.rope_theta);
        EXPECT_LT(max_diff(fast.out, ref.out), 2e-6) << which;
        EXPECT_LT(max_diff(fast.lse, ref.lse), 2e-5) << which;
      }
    }
  }
}

// Every storage dtype; the two the benchmark and the reading-order tests use; the default
// reading order; no options.
constexpr DType kAllDtypes[] = {DType::f32, DType::f16, DType::bf16, DType::i8};
const bool kDefaultOrder[] = {decode_page_order()};
constexpr DType kF16AndInt8[] = {DType::f16, DType::i8};
const DecodeOptions kPlain[] = {DecodeOptions{}};

TEST(Decode, DenseEqualsFlashAttentionOverTheHistory) {
  const int64_t h = 8, hkv = 2, d = 64, len = 1300, n = 3;
  KVCache cache({.kv_heads = hkv, .head_dim = d, .capacity = 2000, .dtype = DType::f32});
  const int64_t s = cache.add_sequence();
  const auto k = randn(len * hkv * d, 1), v = randn(len * hkv * d, 2), q = randn(n * h * d, 3);
  cache.append(s, 0, ConstView3::contiguous(k.data(), {700, hkv, d}),
               ConstView3::contiguous(v.data(), {700, hkv, d}));
  cache.append(s, 0, ConstView3::contiguous(k.data() + 700 * hkv * d, {len - 700, hkv, d}),
               ConstView3::contiguous(v.data() + 700 * hkv * d, {len - 700, hkv, d}));
  const std::vector<int64_t> seqs{s};
  const std::vector<float> sinks{0.5f, -1, 2, 0, 0, 1, -3, 0.25f};
  for (const auto& opts : {AttentionOptions::causal(), AttentionOptions{.window_left = 100, .window_right = 0},
                           AttentionOptions{.softcap = 3}}) {
    const auto got = run(true, {.attention = opts}, cache, seqs, q, h, d, sinks);
    std::vector<float> out(q.size()), lse(static_cast<size_t>(h * n));
    flash_attention(opts, {.q = ConstView3::contiguous(q.data(), {n, h, d}),
                           .k = ConstView3::contiguous(k.data(), {len, hkv, d}),
                           .v = ConstView3::contiguous(v.data(), {len, hkv, d}),
                           .sink_logits = sinks,
                           .out = View3::contiguous(out.data(), {n, h, d}),
                           .lse = View2::contiguous(lse.data(), {h, n})});
    EXPECT_LT(max_diff(got.out, out), 2e-6);
    EXPECT_LT(max_diff(got.lse, lse), 2e-5);
  }
}

TEST(Decode, SinkPolicyEqualsAttentionOverSinksAndWindowAtCachePositions) {
  const int64_t h = 4, hkv = 2, d = 16, sink_tokens = 4, window = 37, total = 300;
  KVCache cache({.kv_heads = hkv, .head_dim = d, .dtype = DType::f32, .policy = KVPolicy::sink,
                 .window = window, .sink_tokens = sink_tokens});
  const int64_t s = cache.add_sequence();
  const auto k = randn(total * hkv * d, 4), v = randn(total * hkv * d, 5);
  const std::vector<int64_t> seqs{s};
  const DecodeOptions o{.rope_theta = 10000};
  for (int64_t t = 0; t < total; ++t) {  // generation: append one token, then attend with it
    cache.append(s, 0, ConstView3::contiguous(k.data() + t * hkv * d, {1, hkv, d}),
                 ConstView3::contiguous(v.data() + t * hkv * d, {1, hkv, d}));
    if (t % 41 != 40 && t != total - 1) continue;
    const auto q = randn(h * d, uint32_t(100 + t));
    const auto got = run(true, o, cache, seqs, q, h, d);
    // Expected: exactly the first sink_tokens and the last `window` tokens, rotated by cache position.
    std::vector<int64_t> keep;
    for (int64_t p = 0; p <= t; ++p)
      if (p < sink_tokens || p > t - window) keep.push_back(p);
    const int64_t m = int64_t(keep.size());
    std::vector<float> kk(static_cast<size_t>(m * hkv * d)), vv(kk.size()), qq = q, out(q.size());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t e = 0; e < hkv * d; ++e) {
        kk[size_t(i * hkv * d + e)] = k[size_t(keep[size_t(i)] * hkv * d + e)];
        vv[size_t(i * hkv * d + e)] = v[size_t(keep[size_t(i)] * hkv * d + e)];
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t hh = 0; hh < hkv; ++hh) rope_rotate_at(&kk[size_t((i * hkv + hh) * d)], d, double(i), 10000);
    for (int64_t hh = 0; hh < h; ++hh) rope_rotate_at(&qq[size_t(hh * d)], d, double(m - 1), 10000);
    attention_reference(AttentionOptions::causal(),
                        {.q = ConstView3::contiguous(qq.data(), {1, h, d}),
                         .k = ConstView3::contiguous(kk.data(), {m, hkv, d}),
                         .v = ConstView3::contiguous(vv.data(), {m, hkv, d}),
                         .out = View3::contiguous(out.data(), {1, h, d})});
    EXPECT_LT(max_diff(got.out, out), 2e-6) << "t=" << t;
  }
}

TEST(Decode, PagedEqualsDenseForInterleavedSequences) {
  const int64_t h = 6, hkv = 3, d = 32;
  KVCache dense({.kv_heads = hkv, .head_dim = d, .capacity = 600, .dtype = DType::f16, .max_sequences = 3});
  KVCache paged({.kv_heads = hkv, .head_dim = d, .capacity = 600, .dtype = DType::f16,
                 .policy = KVPolicy::paged, .block_size = 16, .max_sequences = 3});
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(dense.add_sequence()), paged.add_sequence();
  const int64_t lens[3] = {37, 513, 200};
  const auto k = randn(1400 * hkv * d, 6);
  for (int64_t step = 0; step < 600; step += 7)  // interleave chunks of 7 tokens across sequences
    for (int64_t s = 0; s < 3; ++s) {
      const int64_t n = std::min<int64_t>(7, lens[s] - step);
      if (n <= 0) continue;
      const auto kv = ConstView3::contiguous(k.data() + (s * 600 + step) * hkv * d, {n, hkv, d});
      dense.append(s, 0, kv, kv);
      paged.append(s, 0, kv, kv);
    }
  const auto q = randn(3 * 2 * h * d, 8);  // 2 new queries per sequence
  const auto a = run(true, {}, dense, ids, q, h, d), b = run(true, {}, paged, ids, q, h, d);
  EXPECT_LT(max_diff(a.out, b.out), 1e-6);
  const auto r = run(false, {}, paged, ids, q, h, d);
  EXPECT_LT(max_diff(b.out, r.out), 2e-6);
}

TEST(Decode, StorageDtypesWithinTheirQuantisationBounds) {
  const int64_t h = 8, hkv = 2, d = 64, len = 500;
  const auto k = randn(len * hkv * d, 9), v = randn(len * hkv * d, 10), q = randn(h * d, 11);
  KVCache exact({.kv_heads = hkv, .head_dim = d, .capacity = len, .dtype = DType::f32});
  exact.add_sequence();
  exact.append(0, 0, ConstView3::contiguous(k.data(), {len, hkv, d}), ConstView3::contiguous(v.data(), {len, hkv, d}));
  const std::vector<int64_t> seqs{0};
  const auto want = run(false, {}, exact, seqs, q, h, d);
  double qnorm1 = 0, kmax = 0, vmax = 0;
  for (float x : q) qnorm1 = std::max(qnorm1, double(std::abs(x)));
  qnorm1 *= d;  // ‖q_h‖₁ <= D·max|q|
  for (float x : k) kmax = std::max(kmax, double(std::abs(x)));
  for (float x : v) vmax = std::max(vmax, double(std::abs(x)));
  for (auto [dt, u] : {std::pair{DType::f16, 0x1p-11}, {DType::bf16, 0x1p-8}, {DType::i8, 1.0 / 254}}) {
    KVCache c({.kv_heads = hkv, .head_dim = d, .capacity = len, .dtype = dt});
    c.add_sequence();
    c.append(0, 0, ConstView3::contiguous(k.data(), {len, hkv, d}), ConstView3::contiguous(v.data(), {len, hkv, d}));
    const auto fast = run(true, {}, c, seqs, q, h, d), ref = run(false, {}, c, seqs, q, h, d);
    EXPECT_LT(max_diff(fast.out, ref.out), 2e-6) << dtype_name(dt);  // same stored values
    // Stored values move by at most u·max|x| (relative half-ulp, or half an int8 step of the row
    // max); a score moves by δs <= scale·‖q‖₁·u·max|k|, the output by <= u·max|v| + 2·δs·max|v|.
    const double ds = qnorm1 / std::sqrt(double(d)) * u * kmax;
    EXPECT_LT(max_diff(fast.out, want.out), u * vmax + 2 * ds * vmax) << dtype_name(dt);
  }
}

// Head dims that are not a multiple of the vector width (the kernels' leftover-element paths)
// or of their register blocks' vectors (32, 96, 112: narrower last blocks of 1–3 vectors), and
// row counts that are not a multiple of their 4-row blocks, for every storage dtype.
TEST(Decode, OddHeadDimsAndRowCountsEqualTheReference) {
  ThreadCountScope one(1);
  for (const int64_t d : {8, 24, 32, 40, 96, 112, 136})
    for (const auto& [h, hkv, n] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 1}, {8, 2, 3}, {6, 2, 1}, {5, 5, 2}})
      expect_decode_equals_reference({h, hkv, d, n, 203, 21}, kAllDtypes, kPlain, kDefaultOrder,
                                     "d=" + std::to_string(d) + " h=" + std::to_string(h) +
                                         " hkv=" + std::to_string(hkv) + " n=" + std::to_string(n));
}

// The benchmark's shapes (H = 32, D = 128): rows of 2–8 KiB per token, so a block holds several
// sub-blocks and the prefetch distance spans one or more of them; 2237 cached tokens give work
// items of 1024, 1024, 61 (a partial sub-block and block) and 128 tokens (the tail).
TEST(Decode, BenchmarkShapesWithPartialSubBlocksEqualTheReference) {
  const int64_t h = 32, d = 128;
  for (const int64_t hkv : {32, 8, 1})
    expect_decode_equals_reference({h, hkv, d, 1, 2237, 31}, kF16AndInt8, kPlain, kDefaultOrder,
                                   "hkv=" + std::to_string(hkv));
}

// Both reading orders (decode_page_order): tokens of 256 B–8 KiB, so 16, 4, 2 and 1 tokens per
// 4 KiB page, unmasked blocks read by page phase and windowed blocks in address order; each order
// equals the reference and gives the same bits on one and two threads.
TEST(Decode, EitherReadingOrderEqualsTheReference) {
  const AttentionOptions window{.window_left = 300, .window_right = 0};
  const DecodeOptions opts[] = {DecodeOptions{}, DecodeOptions{.attention = window}};
  const bool orders[] = {false, true};
  for (const auto& [hkv, d] : {std::pair<int64_t, int64_t>{2, 64}, {8, 64}, {8, 128}, {32, 128}})
    expect_decode_equals_reference({32, hkv, d, 1, 1337, 71}, kF16AndInt8, opts, orders,
                                   "hkv=" + std::to_string(hkv) + " d=" + std::to_string(d));
  // The switch reaches the kernels: the two orders sum in different orders (hkv 8, D 128, f16:
  // two tokens per page), so their last bits differ.
  KVCache c({.kv_heads = 8, .head_dim = 128, .capacity = 1337, .dtype = DType::f16});
  c.add_sequence();
  const auto k = randn(1337 * 8 * 128, 72), q = randn(32 * 128, 73);
  c.append(0, 0, ConstView3::contiguous(k.data(), {1337, 8, 128}), ConstView3::contiguous(k.data(), {1337, 8, 128}));
  const std::vector<int64_t> seqs{0};
  Decoded by_order[2];
  for (const bool page_order : {false, true}) {
    DecodePageOrderScope order(page_order);
    by_order[page_order] = run(true, {}, c, seqs, q, 32, 128);
  }
  EXPECT_NE(by_order[0].out, by_order[1].out);
}

// Wide query groups (n·G rows filling whole vectors: MQA and G = 16), served by the wide-group
// kernels: every dtype, several queries per sequence (causal edge inside a block), a window,
// rope, and cache lengths that leave partial blocks and register blocks.
TEST(Decode, WideGroupsEqualTheReference) {
  const int64_t h = 32;
  const AttentionOptions window{.window_left = 300, .window_right = 0};
  const DecodeOptions opts[] = {DecodeOptions{}, DecodeOptions{.attention = window},
                                DecodeOptions{.rope_theta = 10000}};
  for (const int64_t d : {64, 128})
    for (const auto& [hkv, n] : {std::pair<int64_t, int64_t>{1, 1}, {1, 3}, {2, 1}, {2, 2}})
      expect_decode_equals_reference(
          {h, hkv, d, n, 600, 41}, kAllDtypes, opts, kDefaultOrder,
          "d=" + std::to_string(d) + " hkv=" + std::to_string(hkv) + " n=" + std::to_string(n));
}

// Groups of 4 query rows per KV head (G = 4, 16 and G = 4 with two queries), the score kernel's
// 4-row register blocks: every dtype, a window (masked and unmasked blocks of one work item), rope,
// and cache lengths that leave partial register blocks and sub-blocks.
TEST(Decode, GroupsOfFourRowsEqualTheReference) {
  const int64_t h = 32;
  const AttentionOptions window{.window_left = 300, .window_right = 0};
  const DecodeOptions opts[] = {DecodeOptions{}, DecodeOptions{.attention = window},
                                DecodeOptions{.rope_theta = 10000}};
  for (const int64_t d : {64})
    for (const auto& [hkv, n] : {std::pair<int64_t, int64_t>{8, 1}, {2, 1}, {8, 2}})
      expect_decode_equals_reference(
          {h, hkv, d, n, 601, 61}, kAllDtypes, opts, kDefaultOrder,
          "d=" + std::to_string(d) + " hkv=" + std::to_string(hkv) + " n=" + std::to_string(n));
}

// The wide groups' fused softmax pass keeps a reference max per row and raises it only when a
// score exceeds it by more than e^8; the online softmax of the other groups rescales per block.
// All query heads are close to one direction u, and keys along u at positions inside register
// blocks and blocks make every row's score jump by more than that, so earlier probabilities of the
// same block, the sums and the outputs are rescaled mid-block (MQA and G = 4, 8, every dtype, two
// work items).
TEST(Decode, SoftmaxRaisesItsMaxMidBlock) {
  const int64_t h = 32, d = 64, len = 700;
  const auto u = randn(d, 50);
  double uu = 0;
  for (const float x : u) uu += double(x) * x;
  auto q = randn(h * d, 53, 0.05f);
  for (int64_t i = 0; i < h * d; ++i) q[size_t(i)] += u[size_t(i % d)];
  for (const int64_t hkv : {1, 8, 4})
    for (const DType dt : {DType::f32, DType::f16, DType::bf16, DType::i8}) {
      KVCache c({.kv_heads = hkv, .head_dim = d, .capacity = len, .dtype = dt});
      c.add_sequence();
      auto k = randn(len * hkv * d, 51);
      const auto v = randn(len * hkv * d, 52);
      // (position, q·k / sqrt(d) for q = u): the largest scores of both work items ([0, 512) and
      // [512, 700)) sit after other tokens of their blocks, 20+ above everything before them.
      for (const auto& [t, score] : {std::pair<int64_t, double>{37, 5}, {205, 30}, {340, 25}, {600, 6}, {690, 30.5}})
        for (int64_t hh = 0; hh < hkv; ++hh)
          for (int64_t e = 0; e < d; ++e)
            k[size_t((t * hkv + hh) * d + e)] = float(score * std::sqrt(double(d)) / uu) * u[size_t(e)];
      c.append(0, 0, ConstView3::contiguous(k.data(), {len, hkv, d}), ConstView3::contiguous(v.data(), {len, hkv, d}));
      const std::vector<int64_t> seqs{0};
      const auto fast = run(true, {}, c, seqs, q, h, d), ref = run(false, {}, c, seqs, q, h, d);
      // The reference accumulates in double; a float32 score s carries ~2^-24·|s|·sqrt(d) of
      // rounding, which becomes the relative error of its probability, so the outputs may differ
      // by that times max|v| (the three-pass path of masked blocks differs by the same).
      const double score_err = 0x1p-24 * 30.5 * std::sqrt(double(d));
      const std::string what = "hkv=" + std::to_string(hkv) + " " + std::string(dtype_name(dt));
      EXPECT_LT(max_diff(fast.out, ref.out), score_err * testing::max_abs(v.data(), int64_t(v.size()))) << what;
      EXPECT_LT(max_diff(fast.lse, ref.lse), std::max(2e-5, score_err)) << what;
    }
}

// Decodes q (one token of sequence 0) against cache with 1 thread, then with 2.
std::pair<Decoded, Decoded> run_on_one_and_two_threads(const KVCache& cache,
                                                       const std::vector<float>& q, int64_t h,
                                                       int64_t d) {
  const std::vector<int64_t> seqs{0};
  std::pair<Decoded, Decoded> r;
  {
    ThreadCountScope t(1);
    r.first = run(true, {}, cache, seqs, q, h, d);
  }
  {
    ThreadCountScope t(2);
    r.second = run(true, {}, cache, seqs, q, h, d);
  }
  return r;
}

TEST(Decode, SameBitsForAnyThreadCount) {
  const int64_t h = 8, hkv = 8, d = 32, len = 3000;
  KVCache cache({.kv_heads = hkv, .head_dim = d, .capacity = len, .dtype = DType::bf16});
  cache.add_sequence();
  const auto k = randn(len * hkv * d, 12), q = randn(h * d, 13);
  cache.append(0, 0, ConstView3::contiguous(k.data(), {len, hkv, d}), ConstView3::contiguous(k.data(), {len, hkv, d}));
  const auto [one, two] = run_on_one_and_two_threads(cache, q, h, d);
  EXPECT_EQ(one.out, two.out);
}

// The same for MQA (the wide-group kernels) and GQA with G = 4 (4-row register blocks), several
// work items per sequence, in either reading order.
TEST(Decode, GroupedKernelsSameBitsForAnyThreadCount) {
  const int64_t h = 32, d = 128, len = 3000;
  for (const bool page_order : {false, true})
  for (const int64_t hkv : {1, 8}) {
    DecodePageOrderScope order(page_order);
    KVCache cache({.kv_heads = hkv, .head_dim = d, .capacity = len, .dtype = DType::f16});
    cache.add_sequence();
    const auto k = randn(len * hkv * d, 14), v = randn(len * hkv * d, 15), q = randn(h * d, 16);
    cache.append(0, 0, ConstView3::contiguous(k.data(), {len, hkv, d}),
                 ConstView3::contiguous(v.data(), {len, hkv, d}));
    const auto [one, two] = run_on_one_and_two_threads(cache, q, h, d);
    EXPECT_EQ(one.out, two.out) << "hkv=" << hkv << " page order " << page_order;
    EXPECT_EQ(one.lse, two.lse) << "hkv=" << hkv << " page order " << page_order;
  }
}

// A sequence's result does not depend on the batch: each of two sequences decoded alone and in a
// batch of both (several work items each, tails of 128-token items), the same bits.
TEST(Decode, SameBitsAloneAndInABatch) {
  const int64_t h = 8, hkv = 2, d = 64;
  const int64_t lens[2] = {2500, 3300};
  KVCache cache({.kv_heads = hkv, .head_dim = d, .capacity = 3300, .dtype = DType::f16,
                 .max_sequences = 2});
  for (int64_t s = 0; s < 2; ++s) {
    cache.add_sequence();
    const auto k = randn(lens[s] * hkv * d, 20 + uint32_t(s)), v = randn(lens[s] * hkv * d, 22 + uint32_t(s));
    cache.append(s, 0, ConstView3::contiguous(k.data(), {lens[s], hkv, d}),
                 ConstView3::contiguous(v.data(), {lens[s], hkv, d}));
  }
  const auto q = randn(2 * h * d, 24);  // one query per sequence: row 0 sequence 1's, row 1 sequence 0's
  const std::vector<int64_t> both{1, 0};
  const auto batch = run(true, {}, cache, both, q, h, d);
  for (int64_t row = 0; row < 2; ++row) {
    const std::vector<int64_t> alone{both[size_t(row)]};
    const std::vector<float> qr(q.begin() + row * h * d, q.begin() + (row + 1) * h * d);
    const auto one = run(true, {}, cache, alone, qr, h, d);
    EXPECT_EQ(std::vector<float>(batch.out.begin() + row * h * d, batch.out.begin() + (row + 1) * h * d),
              one.out) << "row " << row;
    for (int64_t i = 0; i < h; ++i)
      EXPECT_EQ(batch.lse[size_t(i * 2 + row)], one.lse[size_t(i)]) << "row " << row << " head " << i;
  }
}

TEST(Decode, RejectsBadArguments) {
  KVCache cache({.kv_heads = 2, .head_dim = 8, .capacity = 10, .dtype = DType::f32, .max_sequences = 2});
  cache.add_sequence();
  const std::vector<float> kv(2 * 2 * 8, 1.0f), q(4 * 8, 1.0f);
  cache.append(0, 0, ConstView3::contiguous(kv.data(), {2, 2, 8}), ConstView3::contiguous(kv.data(), {2, 2, 8}));
  const std::vector<int64_t> ok{0}, freed{1};
  EXPECT_NO_THROW(run(true, {}, cache, ok, q, 4, 8));
  EXPECT_THROW(run(true, {}, cache, freed, q, 4, 8), Error);                     // not active
  EXPECT_THROW(run(true, {}, cache, ok, std::vector<float>(3 * 8), 3, 8), Error);  // 3 % 2 heads
  const std::vector<float> three(3 * 4 * 8, 1.0f);
  EXPECT_THROW(run(true, {}, cache, ok, three, 4, 8), Error);  // 3 queries, 2 cached tokens
  DecodeArgs bad{.q = ConstView3::contiguous(q.data(), {1, 4, 8}), .seqs = ok, .cache = &cache, .layer = 1};
  EXPECT_THROW(decode_attention({}, bad), Error);  // layer out of range
}

// The fast path checks what the reference checks: sinks, options and the queries' values, on
// both paths with the same message.
TEST(Decode, FastPathRejectsWhatTheReferenceRejects) {
  KVCache cache({.kv_heads = 1, .head_dim = 8, .capacity = 16, .dtype = DType::f32, .max_sequences = 1});
  cache.add_sequence();
  const std::vector<float> kv(3 * 8, 0.5f), q(4 * 8, 1.0f);
  cache.append(0, 0, ConstView3::contiguous(kv.data(), {3, 1, 8}), ConstView3::contiguous(kv.data(), {3, 1, 8}));
  const std::vector<int64_t> seq{0};
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<float> one_sink{0.0f}, nan_sinks{0.0f, nan, 0.0f, 0.0f};
  std::vector<float> nan_q = q;
  nan_q[5] = nan;
  const std::pair<DecodeOptions, const char*> bad_options[] = {
      {{.attention = {.scale = -1.0f}}, "scale: must be finite"},
      {{.attention = {.scale = nan}}, "scale: must be finite"},
      {{.attention = {.softcap = nan}}, "softcap: must be finite"},
      {{.attention = {.window_left = -5}}, "window_left: must be >= -1"},
      {{.rope_theta = inf}, "rope_theta: must be finite"},
  };
  for (const bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast" : "reference");
    expect_error([&] { run(fast, {}, cache, seq, q, 4, 8, one_sink); }, "sink_logits: needs H = 4");
    expect_error([&] { run(fast, {}, cache, seq, q, 4, 8, nan_sinks); }, "sink_logits: must be finite");
    expect_error([&] { run(fast, {}, cache, seq, nan_q, 4, 8); }, "q: non-finite value");
    for (const auto& [o, phrase] : bad_options) expect_error([&] { run(fast, o, cache, seq, q, 4, 8); }, phrase);
    // Views that do not describe their arrays: an lse of the wrong shape was written past its end,
    // null q or out were dereferenced.
    const auto call = [&](ConstView3 qv, View3 out, View2 lse) {
      const DecodeArgs a{.q = qv, .seqs = seq, .cache = &cache, .layer = 0, .out = out, .lse = lse};
      (fast ? decode_attention : decode_attention_reference)(DecodeOptions{}, a);
    };
    std::vector<float> out(q.size()), lse(4);
    const ConstView3 qv = ConstView3::contiguous(q.data(), {1, 4, 8});
    const View3 ov = View3::contiguous(out.data(), {1, 4, 8});
    call(qv, ov, View2::contiguous(lse.data(), {4, 1}));
    expect_error([&] { call(qv, ov, View2::contiguous(lse.data(), {2, 1})); }, "lse: expected [H, B·n] = [4, 1]");
    expect_error([&] { call(qv, ov, View2::contiguous(lse.data(), {4, 2})); }, "lse: expected");
    expect_error([&] { call({nullptr, qv.shape, qv.stride}, ov, {}); }, "q: null data");
    expect_error([&] { call(qv, {nullptr, ov.shape, ov.stride}, {}); }, "out: null data");
    std::vector<float> wide(2 * q.size());  // the reference wrote a strided out as if contiguous
    expect_error([&] { call(qv, {wide.data(), ov.shape, {64, 16, 2}}, {}); }, "out: last dimension must be contiguous");
  }
}

}  // namespace
}  // namespace attnkit
