// `attnkit bench decode`: filled KV caches, one query token per sequence, timed. Each timed call
// reads one layer's cache cold, as a model's decode step does: the bench fills enough layers that
// together they exceed twice the last-level cache and decodes them in turn.
#include "attnkit/tools/decode_bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "attnkit/attention/decode.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/kv/kv_cache.hpp"
#include "attnkit/tools/roofline.hpp"

namespace attnkit {

int64_t last_level_cache_bytes() {
  for (int name : {_SC_LEVEL4_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long v = sysconf(name);
    if (v > 0) return v;
  }
  return int64_t(64) << 20;  // unknown: assume a large L3
}

DecodeBenchResult run_decode_bench(const DecodeBenchConfig& c) {
  check(c.heads >= 1 && c.kv_heads >= 1 && c.head_dim >= 1 && c.context >= 1 && c.batch >= 1,
        "bench decode: heads, kv-heads, head-dim, context and batch must be >= 1");
  check(c.heads % c.kv_heads == 0, "--kv-heads: ", c.kv_heads, " must divide --heads ", c.heads);
  check(c.repeats >= 1, "--repeats: must be >= 1");
  ThreadCountScope threads(c.threads);
  const int64_t layer_bytes = KVCache({.kv_heads = c.kv_heads, .head_dim = c.head_dim,
                                       .capacity = 1, .dtype = c.dtype})
                                  .bytes_per_token() * c.context * c.batch;
  const int64_t layers =
      c.cold ? std::clamp<int64_t>((2 * last_level_cache_bytes() + layer_bytes - 1) / layer_bytes, 1,
                                   kMaxColdLayers)
             : 1;
  KVCache cache({.layers = layers, .kv_heads = c.kv_heads, .head_dim = c.head_dim,
                 .capacity = c.context, .dtype = c.dtype, .max_sequences = c.batch});
  // Fill in chunks with cheap pseudo-random values in [-1, 1) (xorshift; content does not matter
  // for speed, only that it is not constant).
  const int64_t chunk = 1024, row = c.kv_heads * c.head_dim;
  std::vector<float> buf(static_cast<size_t>(chunk * row));
  uint32_t x = 2463534242u;
  std::vector<int64_t> seqs;
  for (int64_t b = 0; b < c.batch; ++b) {
    seqs.push_back(cache.add_sequence());
    for (int64_t t0 = 0; t0 < c.context; t0 += chunk) {
      const int64_t n = std::min(chunk, c.context - t0);
      for (auto& v : buf) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        v = float(int32_t(x)) * 0x1p-31f;
      }
      const auto view = ConstView3::contiguous(buf.data(), {n, c.kv_heads, c.head_dim});
      for (int64_t l = 0; l < layers; ++l) cache.append(seqs.back(), l, view, view);
    }
  }
  std::vector<float> q(static_cast<size_t>(c.batch * c.heads * c.head_dim), 0.01f), out(q.size());
  DecodeArgs args{.q = ConstView3::contiguous(q.data(), {c.batch, c.heads, c.head_dim}),
                  .seqs = seqs, .cache = &cache, .layer = 0,
                  .out = View3::contiguous(out.data(), {c.batch, c.heads, c.head_dim})};
  const DecodeOptions opts{};
  decode_attention(opts, args);  // warm-up (threads, workspaces)
  double best = 1e300;
  for (int64_t r = 0; r < std::max<int64_t>(c.repeats, layers); ++r) {  // every layer at least once
    args.layer = (r + 1) % layers;  // the layer read longest ago
    const double t0 = now_seconds();
    decode_attention(opts, args);
    best = std::min(best, now_seconds() - t0);
  }
  DecodeBenchResult r;
  r.layers = layers;
  r.ms_per_token = best * 1e3;
  r.cache_bytes = layer_bytes;  // one layer: what is read
  r.gbps = double(r.cache_bytes) / best * 1e-9;
  r.gflops = 4.0 * double(c.heads * c.head_dim * c.context * c.batch) / best * 1e-9;
  return r;
}

}  // namespace attnkit
