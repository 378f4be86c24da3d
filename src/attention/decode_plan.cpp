// Split-KV work plan of a decode call (decode_plan.hpp): work items cut from each sequence's
// cache segments in address order, their sizes (DecodeTiles) a function of the sequence's length.
#include "decode_plan.hpp"

#include <algorithm>

#include "attnkit/kv/kv_cache.hpp"
#include "flash_tile_kernels.hpp"

namespace attnkit::decode {
namespace {

struct Cuts {
  int64_t tail;   // tokens before the tail, where items become kTailChunk long
  int64_t chunk;  // tokens per item before the tail
};

// Item sizes of a sequence of `total` cached tokens. They depend on its length only, so a
// sequence's result depends on neither the thread count nor the rest of its batch.
Cuts cuts(int64_t total) {
  using T = DecodeTiles;
  const int64_t tail = total - std::min(T::kTailTokens, total / T::kTailShare) / T::kTailChunk * T::kTailChunk;
  const int64_t half = flash::round_up((tail + 1) / 2, T::kBlockTokens);
  return {tail, std::clamp(half, T::kMinChunk, T::kChunk)};
}

}  // namespace

Plan make_plan(const DecodeArgs& a) {
  Plan p;
  for (size_t b = 0; b < a.seqs.size(); ++b) {
    p.segs.push_back(a.cache->segments(a.seqs[b], a.layer));
    int64_t total = 0;
    for (const KVSegment& sg : p.segs.back()) total += sg.n;
    p.held.push_back(a.cache->cached(a.seqs[b], a.layer));
    const auto [tail, chunk] = cuts(total);
    int64_t left = 0, done = 0;  // tokens the open item still takes; tokens of the sequence planned
    for (size_t s = 0; s < p.segs.back().size(); ++s)
      for (int64_t t = 0; t < p.segs.back()[s].n;) {
        if (left == 0) {  // a new item; the last one before the tail ends where the tail begins
          p.items.push_back({int64_t(b), int64_t(p.runs.size()), int64_t(p.runs.size())});
          left = done < tail ? std::min(chunk, tail - done) : DecodeTiles::kTailChunk;
        }
        const int64_t count = std::min(p.segs.back()[s].n - t, left);
        p.runs.push_back({int64_t(s), t, count});
        p.items.back().run_end = int64_t(p.runs.size());
        left -= count;
        done += count;
        t += count;
      }
  }
  return p;
}

}  // namespace attnkit::decode
