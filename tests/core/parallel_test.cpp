// parallel_for_grouped: every index once, groups of consecutive indices run by one thread in
// order, closed by their cost or by the four-groups-per-thread cap (group_bounds); errors reach
// the caller. parallel_for_spans: every index once, each thread's span cut by cost (span_bounds),
// run in order by its owner unless another thread took its end; errors reach the caller.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
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

TEST(ParallelForSpans, SpanBoundsCutTheCostInEqualParts) {
  const auto one = [](int64_t) { return 1.0; };
  EXPECT_EQ(span_bounds(10, one, 2), (std::vector<int64_t>{0, 5, 10}));
  EXPECT_EQ(span_bounds(10, one, 3), (std::vector<int64_t>{0, 3, 7, 10}));  // middles at 0.15, 0.45, ...
  EXPECT_EQ(span_bounds(10, one, 1), (std::vector<int64_t>{0, 10}));
  // A decode plan of 16384 tokens: 15 items of 1024, then 8 of 128. Half the tokens is 8192: the
  // first 8 items, then the other 7 and the 8 short ones.
  const auto decode_items = [](int64_t i) { return i < 15 ? 1024.0 : 128.0; };
  EXPECT_EQ(span_bounds(23, decode_items, 2), (std::vector<int64_t>{0, 8, 23}));
  // One heavy item: its span takes it alone, the light ones go to the others.
  const std::vector<double> c{1, 1, 100, 1, 1};
  EXPECT_EQ(span_bounds(5, [&](int64_t i) { return c[size_t(i)]; }, 3),
            (std::vector<int64_t>{0, 2, 3, 5}));
  // Fewer items than threads: empty spans; zero costs: equal counts.
  EXPECT_EQ(span_bounds(2, one, 4), (std::vector<int64_t>{0, 0, 1, 1, 2}));
  EXPECT_EQ(span_bounds(6, [](int64_t) { return 0.0; }, 2), (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(span_bounds(0, one, 2), (std::vector<int64_t>{0, 0, 0}));
}

TEST(ParallelForSpans, EveryIndexOnceAndEachThreadInOrder) {
  for (const int threads : {1, 2, 3}) {
    ThreadCountScope scope(threads);
    for (const int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::vector<int64_t>> by_thread(static_cast<size_t>(threads));
      parallel_for_spans(n, [](int64_t i) { return double(1 + i % 3); },
                         [&](int64_t i) { by_thread[size_t(thread_index())].push_back(i); });
      const std::vector<int64_t> bounds =
          span_bounds(n, [](int64_t i) { return double(1 + i % 3); }, std::min<int>(threads, int(n)));
      std::vector<int> seen(size_t(n), 0);
      for (size_t t = 0; t < by_thread.size(); ++t) {
        const auto& list = by_thread[t];
        for (const int64_t i : list) ++seen[size_t(i)];
        if (t + 1 >= bounds.size()) {
          EXPECT_TRUE(list.empty());
          continue;
        }
        // The owner claims its span from the front, others take from its back: what thread t ran
        // of its own span is the span's first indices, in order, before anything it took.
        int64_t next = bounds[t];
        for (const int64_t i : list) {
          if (i < bounds[t] || i >= bounds[t + 1]) break;
          EXPECT_EQ(i, next++) << "threads " << threads << " n " << n << " thread " << t;
        }
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }))
          << "threads " << threads << " n " << n;
    }
  }
}

TEST(ParallelForSpans, AThreadThatIsHeldUpLosesTheEndOfItsSpan) {
  ThreadCountScope two(2);
  // Thread 1 starts once thread 0 holds item 0, and thread 0 then waits in item 0 until thread 1
  // has run 60 items: thread 1 finishes its own span (50 of 100) and must take the other 10 from
  // the end of thread 0's span. (The waits are bounded, so that a missing second thread fails the
  // test instead of hanging it.)
  std::atomic<bool> started{false};
  std::atomic<int> done_by_1{0};
  std::vector<int> ran_by(100, -1);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  const auto wait_for = [&](auto&& ready) {
    while (!ready() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  };
  parallel_for_spans(100, [](int64_t) { return 1.0; }, [&](int64_t i) {
    ran_by[size_t(i)] = thread_index();
    if (thread_index() == 1) {
      wait_for([&] { return started.load(); });
      ++done_by_1;
    } else if (i == 0) {
      started = true;
      wait_for([&] { return done_by_1.load() >= 60; });
    }
  });
  EXPECT_EQ(ran_by[0], 0);
  EXPECT_GE(std::count(ran_by.begin(), ran_by.end(), 1), 60);
  for (int64_t i = 40; i < 100; ++i) EXPECT_EQ(ran_by[size_t(i)], 1) << "item " << i;
}

TEST(ParallelFor, EachThreadRunsItsOwnSpanFirstAndANestedLoopRunsEveryIndex) {
  ThreadCountScope two(2);
  std::vector<std::vector<int64_t>> by_thread(2);
  std::vector<std::atomic<int>> nested(50);
  parallel_for(10, [&](int64_t i) {
    by_thread[size_t(thread_index())].push_back(i);
    // Inside a parallel region OpenMP gives the inner loop a team of one (unless nesting is on):
    // it still runs every index once.
    parallel_for(5, [&](int64_t j) { ++nested[size_t(5 * i + j)]; });
  });
  for (int t = 0; t < 2; ++t) {  // spans [0, 5) and [5, 10): the owner's part is a prefix, in order
    int64_t next = 5 * t;
    for (const int64_t i : by_thread[size_t(t)]) {
      if (i < 5 * t || i >= 5 * t + 5) break;
      EXPECT_EQ(i, next++);
    }
  }
  for (const auto& count : nested) EXPECT_EQ(count.load(), 1);
}

TEST(ParallelForSpans, RethrowsTheBodysError) {
  ThreadCountScope two(2);
  EXPECT_THROW(parallel_for_spans(
                   100, [](int64_t) { return 1.0; },
                   [](int64_t i) {
                     if (i == 57) throw std::runtime_error("item 57");
                   }),
               std::runtime_error);
}

}  // namespace
}  // namespace attnkit
