#pragma once
// Decode attention: a few new query tokens per sequence against a KV cache (kv/kv_cache.hpp).
// Each work item reads one chunk of a sequence's cache in address order (token by token, all KV
// heads of a token together), converts it to float32 in small blocks, and serves all G query
// heads of each KV head from that one read (split-KV, "flash-decoding"); chunks are merged with
// their logsumexps. Same semantics as flash attention with Lq = n new queries and Lk = the cached
// tokens in cache order: the n queries are the last n cached tokens, causal/window masks are
// aligned bottom-right on cache positions, plus softcap, ALiBi (on cache positions), sinks and
// optional rope-on-read.
#include <cstdint>
#include <span>

#include "attnkit/attention/attention.hpp"
#include "attnkit/core/scoped_setting.hpp"
#include "attnkit/kv/kv_cache.hpp"

namespace attnkit {

struct DecodeOptions {
  AttentionOptions attention = AttentionOptions::causal();  // dropout must be 0
  float rope_theta = 0;  // > 0: rotate q and the cached keys by their cache positions (StreamingLLM)
};

struct DecodeArgs {
  ConstView3 q;                    // [B·n, H, D]: n new queries per sequence, sequence-major
  std::span<const int64_t> seqs;   // [B] cache sequence ids
  const KVCache* cache = nullptr;
  int64_t layer = 0;
  std::span<const float> sink_logits;  // [H] or empty
  std::span<const float> alibi_slopes; // [H] or [B, H] (a row per entry of seqs), or empty; the
                                       // bias of query i and cache position j is -m·|i + S - n - j|,
                                       // S = tokens cached for the sequence
  View3 out;                       // [B·n, H, D]
  View2 lse;                       // [H, B·n] or empty
};

struct DecodeTiles {
  // Cache tokens per work item (split-KV), per sequence: half the tokens before its tail, rounded
  // up to kBlockTokens, within [kMinChunk, kChunk]; the last item before the tail ends where the
  // tail starts. (513–2048 tokens before the tail give two items, for two threads; 512 or fewer
  // one.)
  static constexpr int64_t kChunk = 1024;
  static constexpr int64_t kMinChunk = 512;
  // A sequence's tail, its last 1/kTailShare of cached tokens rounded down to kTailChunk (at most
  // kTailTokens), goes in items of kTailChunk tokens: the items handed out last are short, so
  // threads finish together.
  static constexpr int64_t kTailTokens = 1024;
  static constexpr int64_t kTailShare = 16;
  static constexpr int64_t kTailChunk = 128;
  static constexpr int64_t kBlockTokens = 64;          // tokens per online-softmax block, at most
  static_assert(kMinChunk <= kChunk && kMinChunk % kBlockTokens == 0 && kChunk % kBlockTokens == 0);
  static_assert(kTailTokens % kTailChunk == 0 && kTailChunk <= kMinChunk && kTailShare >= 2);
  static constexpr int64_t kStageBytes = 128 * 1024;   // cache bytes of K (and of V) per block
  // Cache bytes per sub-block (all heads): 1/32 of the core's L2, 16–32 KiB (measured best:
  // 16 KiB with a 512 KiB L2, 32 KiB with 1 MiB; 16–64 KiB alike with 2 MiB). Only the order in
  // which rows are read depends on it, not the results.
  static int64_t sub_block_bytes();
  // Prefetch distance: cache bytes of K (V) ahead of use, and at least one sub-block (a row
  // requested inside the sub-block being consumed would arrive too late).
  static constexpr int64_t kPrefetchBytes = 24 * 1024;
};

// Whether decode_attention reads a block whose scores need no positions one 4 KiB page phase at a
// time (tokens i·ph + phase, ph tokens per page), so each page is read forward, rather than in
// address order. Only the reading and summation order change (results within float32 rounding of
// each other). Default: on for Intel CPUs, off otherwise (measured faster on Ice Lake, slower on
// Zen 5); the environment variable ATTNKIT_DECODE_PAGE_ORDER=0/1, read on first use, overrides.
bool decode_page_order();
// Sets decode_page_order for the process.
void set_decode_page_order(bool on);
using DecodePageOrderScope = ScopedSetting<bool, decode_page_order, set_decode_page_order>;

// Fast path: split-KV over (sequence, chunk); a sequence's result is independent of the thread
// count and of the other sequences in args.seqs.
void decode_attention(const DecodeOptions& opts, const DecodeArgs& args);
// Reference: gathers the cache to float32 in cache order, applies rope, calls attention_reference.
void decode_attention_reference(const DecodeOptions& opts, const DecodeArgs& args);
// Checks the arguments (shapes, sequences, layer, options); throws attnkit::Error.
void validate(const DecodeOptions& opts, const DecodeArgs& args);

}  // namespace attnkit
