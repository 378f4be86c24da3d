// `attnkit bench decode`: a filled one-layer KV cache, one query token per sequence, timed.
#include "attnkit/tools/decode_bench.hpp"

#include <algorithm>
#include <vector>

#include "attnkit/attention/decode.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/kv/kv_cache.hpp"
#include "attnkit/tools/roofline.hpp"

namespace attnkit {

DecodeBenchResult run_decode_bench(const DecodeBenchConfig& c) {
  check(c.heads >= 1 && c.kv_heads >= 1 && c.head_dim >= 1 && c.context >= 1 && c.batch >= 1,
        "bench decode: heads, kv-heads, head-dim, context and batch must be >= 1");
  check(c.heads % c.kv_heads == 0, "--kv-heads: ", c.kv_heads, " must divide --heads ", c.heads);
  check(c.repeats >= 1, "--repeats: must be >= 1");
  ThreadCountScope threads(c.threads);
  KVCache cache({.kv_heads = c.kv_heads, .head_dim = c.head_dim, .capacity = c.context,
                 .dtype = c.dtype, .max_sequences = c.batch});
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
      cache.append(seqs.back(), 0, view, view);
    }
  }
  std::vector<float> q(static_cast<size_t>(c.batch * c.heads * c.head_dim), 0.01f), out(q.size());
  DecodeArgs args{.q = ConstView3::contiguous(q.data(), {c.batch, c.heads, c.head_dim}),
                  .seqs = seqs, .cache = &cache, .layer = 0,
                  .out = View3::contiguous(out.data(), {c.batch, c.heads, c.head_dim})};
  const DecodeOptions opts{};
  decode_attention(opts, args);  // warm-up
  double best = 1e300;
  for (int r = 0; r < c.repeats; ++r) {
    const double t0 = now_seconds();
    decode_attention(opts, args);
    best = std::min(best, now_seconds() - t0);
  }
  DecodeBenchResult r;
  r.ms_per_token = best * 1e3;
  r.cache_bytes = cache.bytes_per_token() * c.context * c.batch;  // one layer: what is read
  r.gbps = double(r.cache_bytes) / best * 1e-9;
  r.gflops = 4.0 * double(c.heads * c.head_dim * c.context * c.batch) / best * 1e-9;
  return r;
}

}  // namespace attnkit
