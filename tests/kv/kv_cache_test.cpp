// KV cache policies and storage: slot bookkeeping, byte counts equal to kv-plan's prediction,
// conversions within their rounding bounds, and bad use that fails cleanly.
#include "attnkit/kv/kv_cache.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/kv/kv_plan.hpp"
#include "test_errors.hpp"
#include "test_random.hpp"

namespace attnkit {
namespace {


ConstView3 view(const std::vector<float>& x, int64_t n, int64_t hkv, int64_t d) {
  return ConstView3::contiguous(x.data(), {n, hkv, d});
}

TEST(KVCache, BytesEqualKvPlanPrediction) {
  for (auto [dtype, kdt] : {std::pair{DType::f16, KVDType::f16}, {DType::bf16, KVDType::bf16},
                            {DType::f32, KVDType::f32}, {DType::i8, KVDType::int8}}) {
    KVCacheConfig c{.layers = 3, .kv_heads = 2, .head_dim = 16, .capacity = 100, .dtype = dtype,
                    .max_sequences = 4};
    KVCache cache(c);
    const int64_t per_token = kv_bytes_per_token({.layers = 3, .heads = 4, .kv_heads = 2, .head_dim = 16, .dtype = kdt});
    EXPECT_EQ(cache.bytes_per_token(), per_token);
    EXPECT_EQ(cache.nbytes(), per_token * 100 * 4) << dtype_name(dtype);
  }
  KVCache paged({.layers = 2, .kv_heads = 2, .head_dim = 8, .capacity = 50,
                 .policy = KVPolicy::paged, .block_size = 16, .max_sequences = 3});
  EXPECT_EQ(paged.config().num_blocks, 12);  // ceil(50/16) = 4 blocks × 3 sequences
  EXPECT_EQ(paged.nbytes(), paged.bytes_per_token() * 12 * 16);
}

TEST(KVCache, SinkPolicyPinsSinksAndRotatesTheWindow) {
  KVCache cache({.kv_heads = 1, .head_dim = 4, .dtype = DType::f32, .policy = KVPolicy::sink,
                 .window = 5, .sink_tokens = 2});
  const int64_t s = cache.add_sequence();
  const auto data = randn(4 * 23, 1);
  for (int64_t t = 0; t < 23; ++t) {  // one token at a time, wrapping the ring several times
    const std::vector<float> row(data.begin() + t * 4, data.begin() + t * 4 + 4);
    cache.append(s, 0, view(row, 1, 1, 4), view(row, 1, 1, 4));
  }
  EXPECT_EQ(cache.length(s, 0), 23);
  EXPECT_EQ(cache.cached(s, 0), 7);
  EXPECT_EQ(cache.positions(s, 0), (std::vector<int64_t>{0, 1, 18, 19, 20, 21, 22}));
  Tensor<float, 3> k({7, 1, 4}), v({7, 1, 4});
  cache.gather(s, 0, k.view(), v.view());
  const auto pos = cache.positions(s, 0);
  for (int64_t i = 0; i < 7; ++i)
    for (int64_t e = 0; e < 4; ++e) EXPECT_EQ(k.view()(i, 0, e), data[size_t(pos[size_t(i)] * 4 + e)]);
}

TEST(KVCache, WindowPolicyKeepsTheLastTokensInOrder) {
  KVCache cache({.kv_heads = 2, .head_dim = 3, .dtype = DType::f32, .policy = KVPolicy::window,
                 .window = 4});
  const int64_t s = cache.add_sequence();
  const auto data = randn(6 * 11, 2);
  cache.append(s, 0, view(data, 11, 2, 3), view(data, 11, 2, 3));  // more than the window at once
  EXPECT_EQ(cache.positions(s, 0), (std::vector<int64_t>{7, 8, 9, 10}));
  Tensor<float, 3> k({4, 2, 3}), v({4, 2, 3});
  cache.gather(s, 0, k.view(), v.view());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t e = 0; e < 6; ++e) EXPECT_EQ(k.data()[i * 6 + e], data[size_t((7 + i) * 6 + e)]);
}

TEST(KVCache, StorageRoundingWithinBounds) {
  const auto data = randn(64 * 2 * 32, 3);
  for (DType dt : {DType::f16, DType::bf16, DType::i8}) {
    KVCache cache({.kv_heads = 2, .head_dim = 32, .capacity = 64, .dtype = dt});
    const int64_t s = cache.add_sequence();
    cache.append(s, 0, view(data, 64, 2, 32), view(data, 64, 2, 32));
    Tensor<float, 3> k({64, 2, 32}), v({64, 2, 32});
    cache.gather(s, 0, k.view(), v.view());
    for (int64_t r = 0; r < 128; ++r) {
      float amax = 0;
      for (int64_t e = 0; e < 32; ++e) amax = std::max(amax, std::abs(data[size_t(r * 32 + e)]));
      for (int64_t e = 0; e < 32; ++e) {
        const float x = data[size_t(r * 32 + e)], y = k.data()[r * 32 + e];
        // Round to nearest: half an ulp (f16: 2^-11, bf16: 2^-8 relative); int8: half a step of
        // amax/127. f16 subnormals (|x| < 2^-14) have an absolute half-ulp of 2^-25.
        const double bound = dt == DType::f16    ? std::max(std::abs(x) * 0x1p-11, 0x1p-25)
                             : dt == DType::bf16 ? std::abs(x) * 0x1p-8
                                                 : amax / 127.0 / 2 * (1 + 1e-6);
        ASSERT_LE(std::abs(x - y), bound) << dtype_name(dt) << " " << x;
      }
    }
  }
}

TEST(KVCache, PagedBlocksAreSharedAndReturned) {
  KVCache cache({.kv_heads = 1, .head_dim = 2, .capacity = 20, .dtype = DType::f32,
                 .policy = KVPolicy::paged, .block_size = 4, .num_blocks = 5, .max_sequences = 3});
  const auto data = randn(2 * 20, 4);
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(a, 0, view(data, 9, 1, 2), view(data, 9, 1, 2));   // 3 blocks
  EXPECT_EQ(cache.free_blocks(), 2);
  // b needs 3 blocks: the pool has 2, so b fails and a is untouched.
  EXPECT_THROW(cache.append(b, 0, view(data, 10, 1, 2), view(data, 10, 1, 2)), Error);
  EXPECT_EQ(cache.length(b, 0), 0);
  EXPECT_EQ(cache.free_blocks(), 2);
  cache.free_sequence(a);
  EXPECT_EQ(cache.free_blocks(), 5);
  cache.append(b, 0, view(data, 10, 1, 2), view(data, 10, 1, 2));
  Tensor<float, 3> k({10, 1, 2}), v({10, 1, 2});
  cache.gather(b, 0, k.view(), v.view());
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(k.data()[i], data[size_t(i)]);
}

TEST(KVCache, PolicyNamesRoundTripAndRecomputeIsNoCache) {
  for (KVPolicy p : {KVPolicy::dense, KVPolicy::window, KVPolicy::sink, KVPolicy::paged, KVPolicy::recompute})
    EXPECT_EQ(parse_kv_policy(kv_policy_name(p)), p);
  try {
    parse_kv_policy("lru", "--policy");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--policy"), std::string::npos) << e.what();
  }
  EXPECT_THROW(KVCache({.policy = KVPolicy::recompute, .window = 4}), Error);  // streaming only
}

TEST(KVCache, BadUseFailsCleanlyAndKeepsOtherSequences) {
  KVCache cache({.layers = 2, .kv_heads = 2, .head_dim = 4, .capacity = 5, .dtype = DType::f32,
                 .max_sequences = 2});
  const auto data = randn(8 * 6, 5);
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(a, 0, view(data, 3, 2, 4), view(data, 3, 2, 4));
  cache.append(b, 0, view(data, 4, 2, 4), view(data, 4, 2, 4));
  EXPECT_THROW(cache.append(a, 0, view(data, 3, 2, 4), view(data, 3, 2, 4)), Error);  // past capacity
  EXPECT_EQ(cache.length(a, 0), 3);
  EXPECT_THROW(cache.append(a, 0, view(data, 2, 4, 2), view(data, 2, 4, 2)), Error);  // wrong heads
  EXPECT_THROW(cache.append(a, 2, view(data, 1, 2, 4), view(data, 1, 2, 4)), Error);  // bad layer
  EXPECT_THROW(cache.add_sequence(), Error);                                          // all in use
  cache.free_sequence(a);
  EXPECT_THROW(cache.append(a, 0, view(data, 1, 2, 4), view(data, 1, 2, 4)), Error);  // freed
  EXPECT_THROW(cache.length(a, 0), Error);
  EXPECT_EQ(cache.length(b, 0), 4);
  Tensor<float, 3> k({4, 2, 4}), v({4, 2, 4});
  cache.gather(b, 0, k.view(), v.view());
  for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(k.data()[i], data[size_t(i)]);
  std::vector<float> nan(8, NAN);
  EXPECT_THROW(cache.append(b, 1, view(nan, 1, 2, 4), view(nan, 1, 2, 4)), Error);
  EXPECT_EQ(cache.length(b, 1), 0);
  EXPECT_THROW(KVCache({.kv_heads = 0, .capacity = 4}), Error);
  EXPECT_THROW(KVCache({.capacity = 4, .dtype = DType::f64}), Error);
  EXPECT_THROW(KVCache({.policy = KVPolicy::sink, .window = 0}), Error);
}

// Values that are finite in float32 but not in the cache's type (f16 rounds 65520 and up to inf,
// bf16 rounds about 3.4e38 to inf) are refused; the largest finite ones are stored.
TEST(KVCache, RefusesValuesOutsideTheStoredTypesRange) {
  const std::vector<float> ones(4, 1.0f);
  for (const auto& [dtype, bad, good] : {std::tuple{DType::f16, 65520.0f, 65504.0f},
                                         std::tuple{DType::bf16, 3.4e38f, 3.38e38f},
                                         std::tuple{DType::f32, 0.0f, 3.4e38f}}) {
    KVCache cache({.kv_heads = 1, .head_dim = 4, .capacity = 4, .dtype = dtype});
    const int64_t s = cache.add_sequence();
    std::vector<float> k(4, good);
    cache.append(s, 0, view(k, 1, 1, 4), view(ones, 1, 1, 4));
    if (dtype == DType::f32) continue;
    k[2] = -bad;
    EXPECT_THROW(cache.append(s, 0, view(k, 1, 1, 4), view(ones, 1, 1, 4)), Error) << dtype_name(dtype);
    EXPECT_THROW(cache.append(s, 0, view(ones, 1, 1, 4), view(k, 1, 1, 4)), Error) << dtype_name(dtype);
    EXPECT_EQ(cache.length(s, 0), 1);
  }
}

// Views that are not arrays: a negative token count (it once made the length negative and a window
// cache then wrote before its buffer), null data, extents whose product overflows; and a cache too
// whose byte count overflows. Each throws attnkit::Error and leaves the cache as it was.
TEST(KVCache, RefusesMalformedViewsAndUnallocatableSizes) {
  const std::vector<float> data(2 * 4, 0.5f);
  for (const KVPolicy policy : {KVPolicy::dense, KVPolicy::window}) {
    KVCache cache({.kv_heads = 1, .head_dim = 4, .capacity = 8, .dtype = DType::f32, .policy = policy,
                   .window = 4});
    const int64_t s = cache.add_sequence();
    cache.append(s, 0, view(data, 2, 1, 4), view(data, 2, 1, 4));
    const ConstView3 negative{data.data(), {-3, 1, 4}, {4, 4, 1}};
    expect_error([&] { cache.append(s, 0, negative, negative); }, "KVCache.append: k: negative extent -3");
    const ConstView3 null_k{nullptr, {2, 1, 4}, {4, 4, 1}};
    expect_error([&] { cache.append(s, 0, null_k, view(data, 2, 1, 4)); }, "KVCache.append: k: null data");
    const ConstView3 huge{nullptr, {int64_t(1) << 32, 1, int64_t(1) << 32}, {int64_t(1) << 32, 1, 1}};
    expect_error([&] { cache.append(s, 0, huge, huge); }, "overflows 64 bits");
    EXPECT_EQ(cache.length(s, 0), 2);
    cache.append(s, 0, view(data, 1, 1, 4), view(data, 1, 1, 4));  // still usable
    EXPECT_EQ(cache.length(s, 0), 3);
    const View3 null_out{nullptr, {3, 1, 4}, {4, 4, 1}};
    Tensor<float, 3> v({3, 1, 4});
    expect_error([&] { cache.gather(s, 0, null_out, v.view()); }, "KVCache.gather: k: null data");
  }
  expect_error([] { KVCache({.layers = 2, .kv_heads = int64_t(1) << 31, .head_dim = int64_t(1) << 31, .capacity = 8}); },
               "overflows 64 bits");
  // int8's per-row scales: 8 bytes per token and head, more than the 1-byte, 1-dim rows themselves.
  expect_error([] { KVCache({.layers = int64_t(1) << 20, .kv_heads = int64_t(1) << 20, .head_dim = 1,
                             .capacity = int64_t(1) << 21, .dtype = DType::i8}); },
               "KVCache: scale bytes overflows 64 bits");
}

}  // namespace
}  // namespace attnkit
