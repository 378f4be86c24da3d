#pragma once
// The split-KV work plan of one decode call: each sequence's cache segments cut into work items
// of at most DecodeTiles::kChunk tokens (kTailChunk in the sequence's tail), read in address
// order. The cut depends on each sequence's cache contents only, never on the thread count or the
// rest of the batch. Internal header.
#include <cstdint>
#include <vector>

#include "attnkit/attention/decode.hpp"

namespace attnkit::decode {

struct Run {  // tokens [start, start + count) of segment `seg`
  int64_t seg, start, count;
};
struct Item {  // one sequence's runs [run_begin, run_end)
  int64_t b, run_begin, run_end;
};

struct Plan {
  std::vector<std::vector<KVSegment>> segs;  // per sequence
  std::vector<int64_t> held;                 // per sequence: tokens the cache holds
  std::vector<Run> runs;
  std::vector<Item> items;                   // a sequence's items are consecutive
};

// The plan of a decode call over args.seqs at args.layer.
Plan make_plan(const DecodeArgs& args);

}  // namespace attnkit::decode
