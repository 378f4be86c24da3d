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

DecodeBench::DecodeBench(const DecodeBenchConfig& c) : c_(c) {
  check(c.heads >= 1 && c.kv_heads >= 1 && c.head_dim >= 1 && c.context >= 1 && c.batch >= 1,
        "bench decode: heads, kv-heads, head-dim, context and batch must be >= 1");
  check(c.heads % c.kv_heads == 0, "--kv-heads: ", c.kv_heads, " must divide --heads ", c.heads);
  ThreadCountScope threads(c.threads);
  layer_bytes_ = KVCache({.kv_heads = c.kv_heads, .head_dim = c.head_dim, .capacity = 1, .dtype = c.dtype})
                     .bytes_per_token() * c.context * c.batch;
  layers_ = c.cold ? std::clamp<int64_t>((2 * last_level_cache_bytes() + layer_bytes_ - 1) / layer_bytes_,
                                         1, kMaxColdLayers)
                   : 1;
  cache_ = std::make_unique<KVCache>(KVCacheConfig{.layers = layers_, .kv_heads = c.kv_heads,
                                                   .head_dim = c.head_dim, .capacity = c.context,
                                                   .dtype = c.dtype, .max_sequences = c.batch});
  // Fill in chunks with cheap pseudo-random values in [-1, 1) (xorshift; content does not matter
  // for speed, only that it is not constant).
  const int64_t chunk = 1024, row = c.kv_heads * c.head_dim;
  std::vector<float> buf(static_cast<size_t>(chunk * row));
  uint32_t x = 2463534242u;
  for (int64_t b = 0; b < c.batch; ++b) {
    seqs_.push_back(cache_->add_sequence());
    for (int64_t t0 = 0; t0 < c.context; t0 += chunk) {
      const int64_t n = std::min(chunk, c.context - t0);
      for (auto& v : buf) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        v = float(int32_t(x)) * 0x1p-31f;
      }
      const auto view = ConstView3::contiguous(buf.data(), {n, c.kv_heads, c.head_dim});
      for (int64_t l = 0; l < layers_; ++l) cache_->append(seqs_.back(), l, view, view);
    }
  }
  q_.assign(static_cast<size_t>(c.batch * c.heads * c.head_dim), 0.01f);
  out_.resize(q_.size());
}

DecodeBench::~DecodeBench() = default;

DecodeBenchResult DecodeBench::time(int repeats) {
  check(repeats >= 1, "--repeats: must be >= 1");
  ThreadCountScope threads(c_.threads);
  DecodeArgs args{.q = ConstView3::contiguous(q_.data(), {c_.batch, c_.heads, c_.head_dim}),
                  .seqs = seqs_, .cache = cache_.get(), .layer = next_layer_,
                  .out = View3::contiguous(out_.data(), {c_.batch, c_.heads, c_.head_dim})};
  const DecodeOptions opts{};
  decode_attention(opts, args);  // warm-up (threads, workspaces): the layer timed last
  double best = 1e300;
  for (int64_t r = 0; r < std::max<int64_t>(repeats, layers_); ++r) {  // every layer at least once
    next_layer_ = (next_layer_ + 1) % layers_;  // the layer read longest ago
    args.layer = next_layer_;
    const double t0 = bench_seconds(c_.cpu_time);
    decode_attention(opts, args);
    best = std::min(best, bench_seconds(c_.cpu_time) - t0);
  }
  DecodeBenchResult r;
  r.layers = layers_;
  r.ms_per_token = best * 1e3;
  r.cache_bytes = layer_bytes_;  // one layer: what is read
  r.gbps = double(r.cache_bytes) / best * 1e-9;
  r.gflops = 4.0 * double(c_.heads * c_.head_dim * c_.context * c_.batch) / best * 1e-9;
  return r;
}

DecodeBenchResult run_decode_bench(const DecodeBenchConfig& c) {
  check(c.repeats >= 1, "--repeats: must be >= 1");
  return DecodeBench(c).time(c.repeats);
}

}  // namespace attnkit
