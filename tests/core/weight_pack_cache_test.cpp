// WeightPackCache and WeightPackScope: entries made once per key until cleared, keys that differ in
// address, kind or geometry, the scope that makes a cache current on its thread only and empties
// it when it ends (also by an exception), nesting.
#include "attnkit/core/weight_pack_cache.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>
#include <vector>

namespace attnkit {
namespace {

std::shared_ptr<const int> make_int(int v, int& made) {
  ++made;
  return std::make_shared<const int>(v);
}

TEST(WeightPackCache, MakesEachKeyOnceUntilCleared) {
  WeightPackCache cache;
  std::vector<float> w(8), v(8);
  int made = 0;
  const WeightPackKey k1{.data = w.data(), .kind = WeightPackKind::kGemmB, .dims = {1, 8, 1, 8}};
  WeightPackKey k2 = k1;
  k2.dims[0] = 0;  // another layout of the same weight
  const WeightPackKey k3{.data = v.data(), .kind = WeightPackKind::kGemmB, .dims = {1, 8, 1, 8}};
  EXPECT_EQ(*cache.get_as<int>(k1, [&] { return make_int(1, made); }), 1);
  EXPECT_EQ(*cache.get_as<int>(k1, [&] { return make_int(9, made); }), 1);
  EXPECT_EQ(*cache.get_as<int>(k2, [&] { return make_int(2, made); }), 2);
  EXPECT_EQ(*cache.get_as<int>(k3, [&] { return make_int(3, made); }), 3);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(cache.size(), 3);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 3);
  cache.clear();
  EXPECT_EQ(cache.size(), 0);
  EXPECT_EQ(*cache.get_as<int>(k1, [&] { return make_int(4, made); }), 4);  // made anew
}

TEST(WeightPackScope, IsCurrentOnItsThreadOnlyAndEmptiesTheCacheAtItsEnd) {
  WeightPackCache cache;
  const WeightPackKey key{.data = &cache, .kind = WeightPackKind::kGemmB};
  int made = 0;
  EXPECT_EQ(current_weight_pack_cache(), nullptr);
  {
    const WeightPackScope scope(cache);
    EXPECT_EQ(current_weight_pack_cache(), &cache);
    WeightPackCache* seen_elsewhere = &cache;
    std::thread([&] { seen_elsewhere = current_weight_pack_cache(); }).join();
    EXPECT_EQ(seen_elsewhere, nullptr);
    current_weight_pack_cache()->get_as<int>(key, [&] { return make_int(1, made); });
    EXPECT_EQ(cache.size(), 1);
  }
  EXPECT_EQ(current_weight_pack_cache(), nullptr);
  EXPECT_EQ(cache.size(), 0);
  try {
    const WeightPackScope scope(cache);
    cache.get_as<int>(key, [&] { return make_int(2, made); });
    throw std::runtime_error("step failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(current_weight_pack_cache(), nullptr);
  EXPECT_EQ(cache.size(), 0);
}

TEST(WeightPackScope, NestedScopesRestoreTheOuterCache) {
  WeightPackCache outer, inner;
  const WeightPackScope a(outer);
  {
    const WeightPackScope b(inner);
    EXPECT_EQ(current_weight_pack_cache(), &inner);
  }
  EXPECT_EQ(current_weight_pack_cache(), &outer);
}

}  // namespace
}  // namespace attnkit
