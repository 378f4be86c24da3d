#pragma once
// Measured decode speed: one new token per sequence against a filled KV cache, as time per token,
// cache bytes read per second, and fractions of this machine's bandwidth and FMA peak measured in
// the same run (`attnkit bench decode`, the demo and the report share it).
#include <cstdint>
#include <memory>
#include <vector>

#include "attnkit/core/dtype.hpp"

namespace attnkit {

struct DecodeBenchConfig {
  int64_t heads = 32, kv_heads = 8, head_dim = 128, context = 16384, batch = 1;
  DType dtype = DType::f16;
  int threads = 0;   // 0 = all cores
  int repeats = 10;  // timed decode calls (at least one per layer); the best is reported
  // Cold caches: fill enough layers to exceed twice the last-level cache and decode them in turn,
  // so every call reads its layer from memory (false: one layer, warm in the cache if it fits).
  bool cold = true;
  // Time each call by the process's CPU clock (all threads) instead of the wall clock: robust
  // against other processes taking the cores of a shared machine; meant for threads = 1.
  bool cpu_time = false;
};

// At most this many layers are filled for cold-cache timing.
inline constexpr int64_t kMaxColdLayers = 256;

struct DecodeBenchResult {
  double ms_per_token = 0;     // one decode call (all sequences of the batch), best of repeats
  int64_t cache_bytes = 0;     // K/V bytes (+ int8 scales) read by one call
  double gbps = 0;             // cache_bytes / time, 1e9 B/s
  double gflops = 0;           // 4·H·D·S·B flops (q·k and p·v) / time
  int64_t layers = 1;          // layers filled and decoded in turn (cold-cache timing)
};

// Bytes of this machine's last-level cache (sysconf: L4, else L3, else L2); 64 MiB if unknown.
int64_t last_level_cache_bytes();

class KVCache;

// One decode shape with its cache filled once (random values), timed as often as asked: lets a
// benchmark alternate shapes in rounds, so load changes on a shared machine hit them alike.
class DecodeBench {
 public:
  // Fills the cache; throws attnkit::Error on impossible shapes.
  explicit DecodeBench(const DecodeBenchConfig& config);
  ~DecodeBench();
  // Times `repeats` decode calls (at least one per layer, each reading the layer read longest
  // ago) with config.threads threads; returns the best.
  DecodeBenchResult time(int repeats);

 private:
  DecodeBenchConfig c_;
  int64_t layers_ = 1, layer_bytes_ = 0, next_layer_ = 0;
  std::unique_ptr<KVCache> cache_;
  std::vector<int64_t> seqs_;
  std::vector<float> q_, out_;
};

// Fills a cache with random values and times decode_attention over one layer per call
// (DecodeBench(config).time(config.repeats)); throws attnkit::Error on impossible shapes.
DecodeBenchResult run_decode_bench(const DecodeBenchConfig& config);

}  // namespace attnkit
