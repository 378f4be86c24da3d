// The split-KV plan of a decode call (attention/decode_plan.hpp): its items cover every cached
// token of every sequence once, in address order, a sequence's items consecutive and of the sizes
// DecodeTiles' rules give its length. Dense and paged caches (pages cut an item into several runs,
// never its size).
#include "attention/decode_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attnkit/kv/kv_cache.hpp"
#include "test_random.hpp"

namespace attnkit {
namespace {

// Item sizes (tokens) of a sequence of `len` cached tokens, worked out by hand from DecodeTiles'
// rules: a tail of min(len / 16, 1024) rounded down to 128 in 128-token items; before it, items of
// half the tokens before the tail rounded up to 64, within [512, 1024], the last of them ending
// where the tail begins.
std::vector<int64_t> expected_items(int64_t len) {
  std::vector<int64_t> v;
  auto add = [&](int64_t n, int64_t size) { v.insert(v.end(), size_t(n), size); };
  switch (len) {
    case 700: add(1, 512), add(1, 188); break;                        // no tail
    case 1024: add(2, 512); break;                                    // 64 → no tail
    case 1100: add(1, 576), add(1, 524); break;                       // 550 → 576
    case 2048: add(2, 960), add(1, 128); break;                       // tail 128
    case 2999: add(2, 1024), add(1, 823), add(1, 128); break;         // 187 → tail 128
    case 17000: add(15, 1024), add(1, 616), add(8, 128); break;       // tail 1024
    case 2237: add(2, 1024), add(1, 61), add(1, 128); break;          // short item before the tail
    case 1153: add(1, 640), add(1, 513); break;                       // 577 → 640 (rounded up)
    case 16: add(1, 16); break;
    case 1: add(1, 1); break;
    case 0: break;                                                    // no items
    default: ADD_FAILURE() << "no expected items for " << len;
  }
  return v;
}

// Checks the plan of sequences `ids` of `cache` (lengths `lens`); returns its number of runs.
size_t expect_plan_covers(const KVCache& cache, const std::vector<int64_t>& ids,
                          const std::vector<int64_t>& lens, const std::string& what) {
  const std::vector<float> q(size_t(ids.size()) * 2 * 4);
  const DecodeArgs a{.q = ConstView3::contiguous(q.data(), {int64_t(ids.size()), 2, 4}),
                     .seqs = ids, .cache = &cache, .layer = 0};
  const decode::Plan p = decode::make_plan(a);
  EXPECT_EQ(p.segs.size(), ids.size()) << what;
  if (p.segs.size() != ids.size()) return 0;
  size_t item = 0;
  for (size_t b = 0; b < ids.size(); ++b) {
    std::vector<int64_t> seg_start{0};  // tokens of the sequence before each segment
    for (const KVSegment& sg : p.segs[b]) seg_start.push_back(seg_start.back() + sg.n);
    int64_t next = 0;  // the sequence's next token, counted over its segments in address order
    std::vector<int64_t> sizes;
    for (; item < p.items.size() && p.items[item].b == int64_t(b); ++item) {
      const decode::Item& it = p.items[item];
      const int64_t first = next;
      for (int64_t r = it.run_begin; r < it.run_end; ++r) {
        const decode::Run& run = p.runs[size_t(r)];
        EXPECT_EQ(seg_start[size_t(run.seg)] + run.start, next) << what << ": item " << item << " run " << r;
        EXPECT_GT(run.count, 0) << what;
        next += run.count;
      }
      sizes.push_back(next - first);
    }
    EXPECT_EQ(sizes, expected_items(lens[b])) << what << ": sequence " << b;
    EXPECT_EQ(next, lens[b]) << what << ": sequence " << b;
  }
  EXPECT_EQ(item, p.items.size()) << what;
  return p.runs.size();
}

TEST(DecodePlan, ItemsCoverTheCacheInChunks) {
  const int64_t hkv = 2, d = 4;
  for (const KVPolicy policy : {KVPolicy::dense, KVPolicy::paged}) {
    KVCache cache({.kv_heads = hkv, .head_dim = d, .capacity = 17000, .dtype = DType::f32,
                   .policy = policy, .block_size = 48, .max_sequences = 11});
    const std::vector<int64_t> lens{700, 2999, 1100, 17000, 1024, 2048, 2237, 1153, 16, 1, 0};
    std::vector<int64_t> ids;
    for (size_t s = 0; s < lens.size(); ++s) ids.push_back(cache.add_sequence());
    const auto k = randn(101 * hkv * d, 3);
    for (int64_t step = 0; step < 17000; step += 101)  // interleaved appends: pages alternate
      for (size_t s = 0; s < lens.size(); ++s) {
        const int64_t n = std::min<int64_t>(101, lens[s] - step);
        if (n <= 0) continue;
        const auto kv = ConstView3::contiguous(k.data(), {n, hkv, d});
        cache.append(ids[s], 0, kv, kv);
      }
    const std::string name = policy == KVPolicy::paged ? "paged" : "dense";
    const size_t runs = expect_plan_covers(cache, ids, lens, name);
    // Paged: about one run per 48-token page.
    if (policy == KVPolicy::paged) {
      EXPECT_GT(runs, 100u);
    }
    expect_plan_covers(cache, {ids[0]}, {lens[0]}, name + ", one sequence of 700");
    expect_plan_covers(cache, {ids[2], ids[1]}, {lens[2], lens[1]}, name + ", reordered");
  }
}

}  // namespace
}  // namespace attnkit
