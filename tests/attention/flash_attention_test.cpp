// Flash attention forward and backward against the reference over the test grid: lengths
// that hit tile tails, Lq != Lk both ways, GQA ratios, head dims, masks, sinks, softcap, dropout,
// ALiBi ([H] and per-sequence [B, H] slopes), varlen with empty sequences, strided views, 1 and 2
// threads, both dQ schedules, both tile products (packed kernels and OpenBLAS) forward and
// backward.
#include "attnkit/attention/flash_attention.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "attention/attention_problem.hpp"
#include "attnkit/attention/attention_reference.hpp"
#include "attnkit/core/parallel.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using testing::Guarded;
using testing::max_abs;
using testing::max_abs_diff;
using testing::Problem;
using testing::ProblemShape;

struct FlashCase {
  std::string name;
  ProblemShape shape;
  AttentionOptions opts;
};

// Compares flash with the reference. Bar: float32 accumulation over n terms of magnitude ~|x| has
// error ~ sqrt(n)·2^-24·|x|; we allow 64·sqrt(n)·2^-24 of the output's scale.
void compare(const FlashCase& c, int threads) {
  ThreadCountScope scope(threads);
  Problem ref(c.shape, 11), fl(c.shape, 11);
  attention_reference(c.opts, ref.args());
  attention_reference_backward(c.opts, ref.args(), ref.grads());
  flash_attention(c.opts, fl.args());
  flash_attention_backward(c.opts, fl.args(), fl.grads());
  ASSERT_TRUE(fl.guards_intact()) << c.name;
  int64_t longest = 1;
  for (size_t b = 0; b < c.shape.lq.size(); ++b)
    longest = std::max<int64_t>({longest, c.shape.lq[b], c.shape.lk[b]});
  const double tol = 64 * std::sqrt(double(longest * c.shape.d)) * 0x1p-24;
  auto expect_close = [&](const Guarded& x, const Guarded& y, const char* what) {
    const double err = max_abs_diff(x.data(), y.data(), x.size());
    const double scale = std::max(1.0, max_abs(y.data(), y.size()));
    EXPECT_LE(err, tol * scale) << c.name << " [" << what << "] threads=" << threads;
  };
  expect_close(fl.out, ref.out, "out");
  expect_close(fl.lse, ref.lse, "lse");
  expect_close(fl.d_q, ref.d_q, "dq");
  expect_close(fl.d_k, ref.d_k, "dk");
  expect_close(fl.d_v, ref.d_v, "dv");
  for (size_t h = 0; h < fl.d_sink.size(); ++h)
    EXPECT_NEAR(fl.d_sink[h], ref.d_sink[h], tol * std::max(1.0f, std::abs(ref.d_sink[h])))
        << c.name << " dsink";
}

std::vector<FlashCase> grid() {
  std::vector<FlashCase> cases;
  const AttentionOptions causal = AttentionOptions::causal();
  for (int l : {1, 7, 17, 63, 65, 113, 512})
    for (int hkv : {4, 2, 1}) {
      const bool is_causal = (l + hkv) % 2 == 1;
      cases.push_back({"L=" + std::to_string(l) + " Hkv=" + std::to_string(hkv) +
                           (is_causal ? " causal" : ""),
                       {{l}, {l}, 4, hkv, 16}, is_causal ? causal : AttentionOptions{}});
    }
  for (auto [lq, lk] : {std::pair{7, 113}, {113, 7}, {65, 600}, {600, 65}, {1, 513}})
    cases.push_back({"Lq=" + std::to_string(lq) + " Lk=" + std::to_string(lk) + " causal",
                     {{lq}, {lk}, 4, 2, 8}, causal});
  for (int d : {32, 64, 80, 128, 256, 20})
    cases.push_back({"D=" + std::to_string(d), {{70}, {70}, 2, 1, d}, causal});
  // Packed-kernel boundaries: D not a multiple of the vector width, G = 3 (rows not a multiple
  // of the row block), keys past a key tile and not a multiple of the key panel.
  cases.push_back({"D=96 G=3", {{100}, {97}, 6, 2, 96}, causal});
  cases.push_back({"D=48 two key tiles", {{530}, {530}, 2, 1, 48}, causal});
  cases.push_back({"D=40 window", {{200}, {231}, 2, 2, 40}, {.window_left = 37, .window_right = 5}});
  cases.push_back({"window", {{300}, {300}, 4, 2, 16}, {.window_left = 40, .window_right = 3}});
  cases.push_back({"window left only", {{600}, {600}, 2, 1, 16}, {.window_left = 100, .window_right = 0}});
  cases.push_back({"sinks causal", {{130}, {130}, 4, 1, 16, true}, causal});
  cases.push_back({"softcap", {{90}, {120}, 4, 4, 16}, {.scale = 0.7f, .softcap = 2.0f}});
  cases.push_back({"dropout", {{70}, {90}, 4, 2, 16}, {.dropout_p = 0.2f, .seed = 3}});
  cases.push_back({"varlen empty", {{0, 37, 5, 0, 80}, {3, 37, 0, 0, 100}, 4, 2, 16, true}, causal});
  cases.push_back({"varlen fused dq", {{33, 9, 70, 2}, {40, 9, 70, 1}, 4, 2, 16}, causal});
  cases.push_back({"strided", {{50}, {60}, 4, 2, 16, false, 24}, causal});
  cases.push_back({"mha fused dq", {{100}, {100}, 8, 8, 16}, causal});
  cases.push_back({"G=32 tile of 32 positions", {{70}, {70}, 32, 1, 8}, causal});
  // A ViT's batch: 40 sequences of 16 tokens, D 24, whose tiny items run in groups.
  cases.push_back({"40 short sequences, grouped items",
                   {std::vector<int32_t>(40, 16), std::vector<int32_t>(40, 16), 4, 4, 24}, {}});
  // ALiBi: shared [H] slopes over MHA/GQA/MQA and tile tails, then with every other option.
  for (int l : {1, 7, 17, 65, 113})
    for (int hkv : {4, 2, 1}) {
      const bool is_causal = (l + hkv) % 2 == 0;
      cases.push_back({"alibi L=" + std::to_string(l) + " Hkv=" + std::to_string(hkv) +
                           (is_causal ? " causal" : ""),
                       {{l}, {l}, 4, hkv, 16, false, 0, 1}, is_causal ? causal : AttentionOptions{}});
    }
  for (auto [lq, lk] : {std::pair{7, 113}, {113, 7}, {65, 600}, {1, 513}}) {
    const std::string name = "alibi Lq=" + std::to_string(lq) + " Lk=" + std::to_string(lk);
    cases.push_back({name + " causal", {{lq}, {lk}, 4, 2, 8, false, 0, 1}, causal});
    cases.push_back({name, {{lq}, {lk}, 4, 1, 8, false, 0, 1}, {}});
  }
  cases.push_back({"alibi window", {{300}, {300}, 4, 2, 16, false, 0, 1},
                   {.window_left = 40, .window_right = 3}});
  cases.push_back({"alibi softcap sinks", {{90}, {120}, 4, 2, 16, true, 0, 1},
                   {.scale = 0.7f, .softcap = 2.0f}});
  cases.push_back({"alibi softcap sinks causal", {{113}, {113}, 4, 4, 16, true, 0, 1},
                   {.window_right = 0, .softcap = 1.5f}});
  cases.push_back({"alibi dropout", {{70}, {90}, 4, 2, 16, false, 0, 1}, {.dropout_p = 0.2f, .seed = 3}});
  cases.push_back({"alibi [B,H] varlen empty", {{0, 37, 5, 0, 80}, {3, 37, 0, 0, 100}, 4, 2, 16, true, 0, 2},
                   causal});
  cases.push_back({"alibi [B,H] varlen fused dq", {{33, 9, 70, 2}, {40, 9, 70, 1}, 4, 2, 16, false, 0, 2},
                   {}});
  cases.push_back({"alibi strided", {{50}, {60}, 4, 2, 16, false, 24, 1}, causal});
  return cases;
}

TEST(FlashAttention, MatchesReferenceOneThread) {
  for (const auto& c : grid()) compare(c, 1);
}

TEST(FlashAttention, MatchesReferenceTwoThreads) {
  for (const auto& c : grid()) compare(c, 2);
}

TEST(FlashAttention, ForcedTileProductsMatchReference) {
  for (FlashProducts p : {FlashProducts::packed, FlashProducts::blas}) {
    FlashProductsScope force(p);
    for (const auto& c : grid()) compare(c, 1);
  }
}

TEST(FlashAttention, BitwiseIdenticalForAnyThreadCount) {
  for (FlashProducts products : {FlashProducts::packed, FlashProducts::blas})
  for (const char* name : {"fused", "split", "grouped"}) {
    FlashProductsScope force(products);
    const ProblemShape shape =
        std::string(name) == "fused"   ? ProblemShape{{300, 200}, {300, 250}, 8, 4, 32, true}
        : std::string(name) == "split" ? ProblemShape{{700}, {700}, 4, 1, 32, true}
                                       : ProblemShape{std::vector<int32_t>(40, 16), std::vector<int32_t>(40, 16), 4, 2, 24, true};
    Problem one(shape, 5), three(shape, 5);
    const auto opts = AttentionOptions::causal();
    {
      ThreadCountScope s(1);
      flash_attention(opts, one.args());
      flash_attention_backward(opts, one.args(), one.grads());
    }
    {
      ThreadCountScope s(3);
      flash_attention(opts, three.args());
      flash_attention_backward(opts, three.args(), three.grads());
    }
    for (auto [x, y] : {std::pair{&one.out, &three.out}, {&one.d_q, &three.d_q},
                        {&one.d_k, &three.d_k}, {&one.d_v, &three.d_v}})
      EXPECT_EQ(x->raw, y->raw) << name;
    EXPECT_EQ(one.d_sink, three.d_sink) << name;
  }
}

// The packed path finds NaN and inf in q, k and v while packing them; either path names the
// first offending element. Strided views, a head dim that ends inside a panel, varlen, GQA, a key
// that no query sees (causal, window 1, Lk > Lq) and the keys of a sequence without queries: bad
// values there are refused as well.
TEST(FlashAttention, NonFiniteInputsAreNamedOnEitherProductPath) {
  const ProblemShape shape{.lq = {5, 0, 40}, .lk = {37, 9, 40}, .h = 4, .hkv = 2, .d = 20, .token_pad = 3};
  AttentionOptions opts = AttentionOptions::causal();
  opts.window_left = 1;
  const float inf = std::numeric_limits<float>::infinity();
  for (const FlashProducts path : {FlashProducts::automatic, FlashProducts::blas})
    for (const int threads : {1, 2})
      for (const char* name : {"q", "k", "v"})
        for (const float bad : {std::numeric_limits<float>::quiet_NaN(), inf, -inf}) {
          Problem p(shape, 3);
          Guarded& g = name[0] == 'q' ? p.q : name[0] == 'k' ? p.k : p.v;
          const int64_t tokens = name[0] == 'q' ? p.tq : p.tk, heads = name[0] == 'q' ? 4 : 2;
          // (token, head, element): first, last, the unseen key 0 of sequence 0, mid-panel, and
          // for k and v the first key of sequence 1, which has no queries (q: a middle token).
          const int64_t other = name[0] == 'q' ? tokens / 3 : 37;
          for (const auto& [t, h, e] : {std::array<int64_t, 3>{0, 0, 0}, {tokens - 1, heads - 1, 19},
                                        {0, 1, 7}, {tokens / 2, heads - 1, 17}, {other, 1, 11}}) {
            SCOPED_TRACE(::testing::Message() << name << " = " << bad << " at [" << t << ", " << h
                                              << ", " << e << "], threads " << threads
                                              << (path == FlashProducts::blas ? ", OpenBLAS" : ""));
            ThreadCountScope scope(threads);
            FlashProductsScope products(path);
            const int64_t at = t * p.row(heads) + h * shape.d + e;
            const float kept = g.data()[at];
            g.data()[at] = bad;
            std::ostringstream want;
            want << name << ": non-finite value " << bad << " at [" << t << ", " << h << ", " << e << "]";
            expect_error([&] { flash_attention(opts, p.args()); }, want.str());
            g.data()[at] = kept;
          }
          flash_attention(opts, p.args());  // all finite again: no error
          EXPECT_TRUE(p.guards_intact());
        }
}

// The backward's fused packed schedule (at least 8 (sequence, KV head) pairs) checks q, dO, k and
// v while packing them; the two-pass schedule and the OpenBLAS path scan them first. Either way
// the first offending element is named. Sequence 2 has two backward key tiles (140 keys),
// sequence 3 queries but no keys.
TEST(FlashAttention, NonFiniteBackwardInputsAreNamedOnEverySchedule) {
  AttentionOptions opts = AttentionOptions::causal();
  opts.window_left = 1;
  const float inf = std::numeric_limits<float>::infinity();
  // 3 × 2 pairs: two-pass schedule; 3 × 4 pairs: fused.
  for (const int64_t hkv : {2, 4})
    for (const FlashProducts path : {FlashProducts::automatic, FlashProducts::blas})
      for (const int threads : {1, 2})
        for (const char* name : {"q", "k", "v", "d_out"})
          for (const float bad : {std::numeric_limits<float>::quiet_NaN(), inf, -inf}) {
            const ProblemShape shape{.lq = {5, 0, 40, 3}, .lk = {37, 9, 140, 0}, .h = 2 * hkv,
                                     .hkv = hkv, .d = 20, .token_pad = 3};
            Problem p(shape, 5);
            ThreadCountScope scope(threads);
            FlashProductsScope products(path);
            flash_attention(opts, p.args());  // out and lse of finite inputs
            const bool is_q = name[0] == 'q' || name[0] == 'd';
            Guarded& g = name[0] == 'q' ? p.q : name[0] == 'k' ? p.k : name[0] == 'v' ? p.v : p.d_out;
            const int64_t tokens = is_q ? p.tq : p.tk, heads = is_q ? shape.h : hkv;
            const int64_t row = name[0] == 'd' ? shape.h * shape.d : p.row(heads);  // d_out is dense
            // q, d_out: a middle token and the last sequence's; k, v: sequence 1's first key and
            // a key in sequence 2's second key tile.
            const int64_t other = is_q ? tokens / 3 : 37, late = is_q ? 46 : 46 + 130;
            for (const auto& [t, h, e] : {std::array<int64_t, 3>{0, 0, 0}, {tokens - 1, heads - 1, 19},
                                          {0, 1, 7}, {tokens / 2, heads - 1, 17}, {other, 1, 11},
                                          {late, heads - 1, 3}}) {
              SCOPED_TRACE(::testing::Message() << name << " = " << bad << " at [" << t << ", " << h
                                                << ", " << e << "], Hkv " << hkv << ", threads " << threads
                                                << (path == FlashProducts::blas ? ", OpenBLAS" : ""));
              const int64_t at = t * row + h * shape.d + e;
              const float kept = g.data()[at];
              g.data()[at] = bad;
              std::ostringstream want;
              want << name << ": non-finite value " << bad << " at [" << t << ", " << h << ", " << e << "]";
              expect_error([&] { flash_attention_backward(opts, p.args(), p.grads()); }, want.str());
              g.data()[at] = kept;
            }
            flash_attention_backward(opts, p.args(), p.grads());  // all finite again: no error
            EXPECT_TRUE(p.guards_intact());
          }
}

TEST(FlashAttention, FullyMaskedRowsAreZeroNotNaN) {
  Problem p({{40}, {10}, 2, 1, 8}, 2);  // bottom-right causal: queries 0..29 see no key
  flash_attention(AttentionOptions::causal(), p.args());
  flash_attention_backward(AttentionOptions::causal(), p.args(), p.grads());
  auto a = p.args();
  for (int64_t t = 0; t < 30; ++t)
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_TRUE(std::isinf(a.lse(h, t)) && a.lse(h, t) < 0);
      for (int64_t e = 0; e < 8; ++e) {
        EXPECT_EQ(a.out(t, h, e), 0.0f);
        EXPECT_EQ(p.grads().d_q(t, h, e), 0.0f);
      }
    }
}

TEST(FlashAttention, DropoutRateMatchesP) {
  // With v = one-hot columns per key, out[i, j] = P_ij·Z_ij: count zeros among visible entries.
  const int64_t l = 256;
  ProblemShape shape{{int32_t(l)}, {int32_t(l)}, 2, 1, int64_t(l)};
  Problem p(shape, 4);
  for (int64_t j = 0; j < l; ++j)
    for (int64_t e = 0; e < l; ++e) p.v.data()[j * l + e] = j == e ? 1.0f : 0.0f;
  const AttentionOptions o{.dropout_p = 0.3f, .seed = 17};
  flash_attention(o, p.args());
  int64_t dropped = 0, total = 0;
  auto a = p.args();
  for (int64_t i = 0; i < l; ++i)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t j = 0; j < l; ++j) {
        dropped += a.out(i, h, j) == 0.0f;
        ++total;
      }
  EXPECT_NEAR(double(dropped) / double(total), 0.3, 0.01);
}

TEST(FlashAttention, RejectsMissingLseInBackward) {
  Problem p({{8}, {8}, 2, 1, 8}, 2);
  auto a = p.args();
  flash_attention({}, a);
  a.lse = {};
  EXPECT_THROW(flash_attention_backward({}, a, p.grads()), Error);
}

// Equal scores of any finite size give the mean of the visible values. With scores near 1.6e19 the
// packed path's tail lanes, padded with m - 128 (= m at that size), each added 1 to the row sum
// (out 0.25 instead of 1 for 4 keys), and the reference's P = e^{s - lse} lost log Σ in lse (out 4).
TEST(FlashAttention, HugeEqualScoresGiveTheMeanOfTheValues) {
  const int64_t t = 5, h = 2, d = 8;
  std::vector<float> q(t * h * d, 0.1f), k(t * h * d, 0.2f), v(t * h * d), out(t * h * d), lse(h * t);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 7) - 3.0f;
  const AttentionArgs a{.q = ConstView3::contiguous(q.data(), {t, h, d}), .k = ConstView3::contiguous(k.data(), {t, h, d}),
                        .v = ConstView3::contiguous(v.data(), {t, h, d}),
                        .out = View3::contiguous(out.data(), {t, h, d}), .lse = View2::contiguous(lse.data(), {h, t})};
  for (const float scale : {1.0f, 1e20f, 3e38f})
    for (const bool causal : {false, true})
      for (const bool reference : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "scale " << scale << (causal ? " causal" : "") << (reference ? " reference" : ""));
        AttentionOptions o = causal ? AttentionOptions::causal() : AttentionOptions{};
        o.scale = scale;
        (reference ? attention_reference : flash_attention)(o, a);
        for (int64_t i = 0; i < t; ++i)
          for (int64_t hh = 0; hh < h; ++hh)
            for (int64_t e = 0; e < d; ++e) {
              const int64_t visible = causal ? i + 1 : t;
              double mean = 0;
              for (int64_t j = 0; j < visible; ++j) mean += v[size_t((j * h + hh) * d + e)];
              mean /= double(visible);
              EXPECT_NEAR(out[size_t((i * h + hh) * d + e)], mean, 1e-5) << i << " " << hh << " " << e;
            }
      }
}

// A null view whose extents multiply past 2^63 once had a wrapped element count of 0, so the null
// data passed and the finiteness check read address 0.
TEST(FlashAttention, RejectsViewsWhoseElementCountOverflows) {
  Problem p({{8}, {8}, 2, 1, 8}, 2);
  const int64_t big = int64_t(1) << 32;
  for (const char* which : {"q", "k"}) {
    auto a = p.args();
    (which[0] == 'q' ? a.q : a.k) = ConstView3{nullptr, {big, big, 1}, {big, 1, 1}};
    expect_error([&] { flash_attention({}, a); }, std::string(which) + ": element count overflows");
    expect_error([&] { attention_reference({}, a); }, std::string(which) + ": element count overflows");
  }
}

}  // namespace
}  // namespace attnkit
