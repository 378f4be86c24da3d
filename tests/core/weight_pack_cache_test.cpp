// WeightPackCache and WeightPackScope: entries made once per key until cleared, keys that differ in
// address, kind or geometry, the previous entry of a key handed to make() after a clear (only when
// nobody holds it, and for one clear only), the scope that makes a cache current on its thread
// only and empties it when it ends (also by an exception), nesting.
#include "attnkit/core/weight_pack_cache.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>
#include <vector>

namespace attnkit {
namespace {

std::shared_ptr<int> make_int(int v, int& made) {
  ++made;
  return std::make_shared<int>(v);
}

TEST(WeightPackCache, MakesEachKeyOnceUntilCleared) {
  WeightPackCache cache;
  std::vector<float> w(8), v(8);
  int made = 0;
  const WeightPackKey k1{.data = w.data(), .kind = WeightPackKind::kGemmB, .dims = {1, 8, 1, 8}};
  WeightPackKey k2 = k1;
  k2.dims[0] = 0;  // another layout of the same weight
  const WeightPackKey k3{.data = v.data(), .kind = WeightPackKind::kGemmB, .dims = {1, 8, 1, 8}};
  EXPECT_EQ(*cache.get_as<int>(k1, [&](std::shared_ptr<int>) { return make_int(1, made); }), 1);
  EXPECT_EQ(*cache.get_as<int>(k1, [&](std::shared_ptr<int>) { return make_int(9, made); }), 1);
  EXPECT_EQ(*cache.get_as<int>(k2, [&](std::shared_ptr<int>) { return make_int(2, made); }), 2);
  EXPECT_EQ(*cache.get_as<int>(k3, [&](std::shared_ptr<int>) { return make_int(3, made); }), 3);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(cache.size(), 3);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 3);
  cache.clear();
  EXPECT_EQ(cache.size(), 0);
  EXPECT_EQ(*cache.get_as<int>(k1, [&](std::shared_ptr<int>) { return make_int(4, made); }), 4);  // made anew
}

// make() for an int entry: rewrites the previous entry in place when given one, else a new entry.
auto refill(int v, std::vector<const int*>& given) {
  return [v, &given](std::shared_ptr<int> previous) {
    given.push_back(previous.get());
    if (!previous) return std::make_shared<int>(v);
    *previous = v;
    return previous;
  };
}

TEST(WeightPackCache, HandsTheKeysPreviousEntryToMakeAfterAClear) {
  WeightPackCache cache;
  std::vector<float> w(8), v(8);
  const WeightPackKey kw{.data = w.data(), .kind = WeightPackKind::kGemmB, .dims = {1, 8, 1, 8}};
  const WeightPackKey kv{.data = v.data(), .kind = WeightPackKind::kGemmB, .dims = {1, 8, 1, 8}};
  std::vector<const int*> given;
  const int* first = cache.get_as<int>(kw, refill(1, given)).get();
  cache.get_as<int>(kv, refill(2, given));
  EXPECT_EQ(given, (std::vector<const int*>{nullptr, nullptr}));
  cache.clear();
  EXPECT_EQ(cache.size(), 0);
  // Step 2 uses w only: its entry's storage comes back, rewritten.
  const std::shared_ptr<const int> again = cache.get_as<int>(kw, refill(3, given));
  EXPECT_EQ(given.back(), first);
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(*again, 3);
  EXPECT_EQ(cache.reuses(), 1);
  cache.clear();
  // Step 3: v's entry was not used in step 2, so it is gone; w's is held by `again`, so it is not
  // handed out (a holder must never see its packing rewritten).
  cache.get_as<int>(kv, refill(4, given));
  EXPECT_EQ(given.back(), nullptr);
  const std::shared_ptr<const int> fresh = cache.get_as<int>(kw, refill(5, given));
  EXPECT_EQ(given.back(), nullptr);
  EXPECT_NE(fresh.get(), first);
  EXPECT_EQ(*again, 3);
  EXPECT_EQ(*fresh, 5);
  EXPECT_EQ(cache.reuses(), 1);
  EXPECT_EQ(cache.misses(), 5);
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
    current_weight_pack_cache()->get_as<int>(key, [&](std::shared_ptr<int>) { return make_int(1, made); });
    EXPECT_EQ(cache.size(), 1);
  }
  EXPECT_EQ(current_weight_pack_cache(), nullptr);
  EXPECT_EQ(cache.size(), 0);
  try {
    const WeightPackScope scope(cache);
    cache.get_as<int>(key, [&](std::shared_ptr<int>) { return make_int(2, made); });
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
