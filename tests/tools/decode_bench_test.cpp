// The decode benchmark's bookkeeping (not its timings): cold runs fill enough layers to exceed
// twice the last-level cache (or the cap), bytes and rates are consistent, bad shapes throw.
#include "attnkit/tools/decode_bench.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

TEST(DecodeBench, ColdRunsCycleLayersPastTwiceTheLastLevelCache) {
  const int64_t llc = last_level_cache_bytes();
  ASSERT_GT(llc, 0);
  for (const int64_t context : {64, 4096}) {
    const DecodeBenchConfig c{.heads = 4, .kv_heads = 2, .head_dim = 16, .context = context,
                              .threads = 1, .repeats = 1};
    const DecodeBenchResult r = run_decode_bench(c);
    const int64_t layer_bytes = 2 * 2 * 16 * 2 * context;  // K and V, Hkv·D f16 values per token
    EXPECT_EQ(r.cache_bytes, layer_bytes);
    const int64_t want = std::clamp<int64_t>((2 * llc + layer_bytes - 1) / layer_bytes, 1, kMaxColdLayers);
    EXPECT_EQ(r.layers, want) << "context " << context;
    EXPECT_TRUE(r.layers == kMaxColdLayers || r.layers * layer_bytes >= 2 * llc);
    EXPECT_GT(r.ms_per_token, 0);
    EXPECT_NEAR(r.gbps, double(r.cache_bytes) / (r.ms_per_token * 1e-3) * 1e-9, 1e-9 * r.gbps);
    EXPECT_NEAR(r.gflops, 4.0 * 4 * 16 * double(context) / (r.ms_per_token * 1e-3) * 1e-9, 1e-9 * r.gflops);
  }
}

TEST(DecodeBench, WarmRunsTimeOneLayer) {
  const DecodeBenchConfig c{.heads = 4, .kv_heads = 1, .head_dim = 8, .context = 100,
                            .dtype = DType::i8, .threads = 1, .repeats = 2, .cold = false};
  const DecodeBenchResult r = run_decode_bench(c);
  EXPECT_EQ(r.layers, 1);
  EXPECT_EQ(r.cache_bytes, 100 * (2 * 8 + 2 * 4));  // int8 K and V plus a float scale each
}

TEST(DecodeBench, FilledOnceTimedManyTimes) {
  const DecodeBenchConfig c{.heads = 4, .kv_heads = 2, .head_dim = 16, .context = 64, .threads = 1};
  DecodeBench bench(c);
  const DecodeBenchResult a = bench.time(1), b = bench.time(3);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_GT(a.layers, 1);  // cold: cycles through layers, continuing where the last call stopped
  EXPECT_EQ(a.cache_bytes, b.cache_bytes);
  EXPECT_GT(a.ms_per_token, 0);
  EXPECT_GT(b.ms_per_token, 0);
  EXPECT_THROW(bench.time(0), Error);
}

TEST(DecodeBench, ImpossibleShapesThrow) {
  EXPECT_THROW(run_decode_bench({.heads = 6, .kv_heads = 4}), Error);
  EXPECT_THROW(run_decode_bench({.context = 0}), Error);
  EXPECT_THROW(run_decode_bench({.repeats = 0}), Error);
  EXPECT_THROW(DecodeBench({.heads = 6, .kv_heads = 4}), Error);
}

}  // namespace
}  // namespace attnkit
