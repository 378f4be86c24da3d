// parallel_for_grouped: every index once, groups of consecutive indices run by one thread in
// order, closed by their cost or by the four-groups-per-thread cap (group_bounds); errors reach
// the caller.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "attnkit/core/parallel.hpp"

namespace attnkit {
namespace {

// Runs parallel_for_grouped over n items and returns, per thread, the indices it ran in order.
std::vector<std::vector<int64_t>> run_grouped(int64_t n, const std::function<double(int64_t)>& cost,
                                              double min_cost) {
  std::vector<std::vector<int64_t>> by_thread(static_cast<size_t>(num_threads()));
  parallel_for_grouped(n, cost, min_cost,
                       [&](int64_t i) { by_thread[size_t(thread_index())].push_back(i); });
  return by_thread;
}

// Whether indices [lo, hi) appear, in order and back to back, in one thread's list.
bool ran_as_one_group(const std::vector<std::vector<int64_t>>& by_thread, int64_t lo, int64_t hi) {
  for (const auto& list : by_thread) {
    const auto at = std::find(list.begin(), list.end(), lo);
    if (at == list.end()) continue;
    for (int64_t i = lo; i < hi; ++i)
      if (at + (i - lo) >= list.end() || *(at + (i - lo)) != i) return false;
    return true;
  }
  return false;
}

TEST(ParallelForGrouped, EveryIndexOnceForAnyThreadCount) {
  for (const int threads : {1, 2, 3}) {
    ThreadCountScope scope(threads);
    for (const int64_t n : {0, 1, 7, 1000}) {
      const auto by_thread = run_grouped(n, [](int64_t i) { return double(i % 5); }, 10);
      std::vector<int> seen(size_t(n), 0);
      for (const auto& list : by_thread)
        for (const int64_t i : list) ++seen[size_t(i)];
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }))
          << "threads " << threads << " n " << n;
    }
  }
}

TEST(ParallelForGrouped, GroupsCloseAtTheirCost) {
  ThreadCountScope two(2);
  // 1000 items of cost 1, groups of 8 (the cap, 1000 / 8 = 125, is larger): [8k, 8k + 8).
  const auto by_thread = run_grouped(1000, [](int64_t) { return 1.0; }, 8);
  for (int64_t lo = 0; lo < 1000; lo += 8)
    EXPECT_TRUE(ran_as_one_group(by_thread, lo, std::min<int64_t>(lo + 8, 1000))) << "group at " << lo;
}

TEST(ParallelForGrouped, GroupBoundsByCostAndByTheCap) {
  const auto one = [](int64_t) { return 1.0; };
  // 20 items of cost 1, min_cost 6, 2 threads: the cap, 20 / (4 · 2) = 2.5, is lower, so groups
  // close at 3 items (the last holds 2).
  EXPECT_EQ(group_bounds(20, one, 6, 2), (std::vector<int64_t>{0, 3, 6, 9, 12, 15, 18, 20}));
  // One thread: cap 20 / 4 = 5 items.
  EXPECT_EQ(group_bounds(20, one, 6, 1), (std::vector<int64_t>{0, 5, 10, 15, 20}));
  // min_cost below the cap closes them: groups of 2.
  EXPECT_EQ(group_bounds(8, one, 2, 1), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  // Uneven costs: items gather until they reach 4 (the cap, 17 / 4, is higher); the heavy third
  // item closes the first group.
  const std::vector<double> c{1, 1, 10, 1, 1, 1, 1, 1};
  EXPECT_EQ(group_bounds(8, [&](int64_t i) { return c[size_t(i)]; }, 4, 1),
            (std::vector<int64_t>{0, 3, 7, 8}));
  EXPECT_EQ(group_bounds(0, one, 4, 2), (std::vector<int64_t>{0}));
}

TEST(ParallelForGrouped, RethrowsTheBodysError) {
  ThreadCountScope two(2);
  EXPECT_THROW(parallel_for_grouped(
                   100, [](int64_t) { return 1.0; }, 4,
                   [](int64_t i) {
                     if (i == 57) throw std::runtime_error("item 57");
                   }),
               std::runtime_error);
}

}  // namespace
}  // namespace attnkit
