// Split-KV work plan of a decode call (decode_plan.hpp): chunks of DecodeTiles::kChunk tokens per
// work item, cut from each sequence's cache segments in address order.
#include "decode_plan.hpp"

#include <algorithm>

#include "attnkit/kv/kv_cache.hpp"

namespace attnkit::decode {

Plan make_plan(const DecodeArgs& a) {
  Plan p;
  for (size_t b = 0; b < a.seqs.size(); ++b) {
    p.segs.push_back(a.cache->segments(a.seqs[b], a.layer));
    p.held.push_back(a.cache->cached(a.seqs[b], a.layer));
    int64_t in_item = 0;
    for (size_t s = 0; s < p.segs.back().size(); ++s)
      for (int64_t t = 0; t < p.segs.back()[s].n;) {
        if (in_item == 0 || in_item == DecodeTiles::kChunk) {
          p.items.push_back({int64_t(b), int64_t(p.runs.size()), int64_t(p.runs.size())});
          in_item = 0;
        }
        const int64_t count = std::min(p.segs.back()[s].n - t, DecodeTiles::kChunk - in_item);
        p.runs.push_back({int64_t(s), t, count});
        p.items.back().run_end = int64_t(p.runs.size());
        in_item += count;
        t += count;
      }
  }
  return p;
}


}  // namespace attnkit::decode
