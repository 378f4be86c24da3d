#pragma once
// Measured attention speed: flash forward/backward against the naive path and this machine's
// sgemm rate, all in one run (shared by `attnkit bench attention`, the demo and the report).
#include <cstdint>
#include <string>

#include "attnkit/attention/flash_attention.hpp"

namespace attnkit {

struct AttentionBenchConfig {
  int64_t batch = 1, heads = 32, kv_heads = 8, head_dim = 128, seq = 2048;
  bool causal = false;
  bool alibi = false;        // ALiBi with the paper's geometric slopes 2^(-8(h+1)/H)
  bool backward = false;     // also time the backward
  bool naive = true;         // also time the naive baseline (skipped past naive_limit_bytes)
  int threads = 0;           // 0 = all cores
  int repeats = 3;           // timed calls; the best is reported
  bool cpu_time = false;     // time with the process's CPU clock (robust on a shared machine
                             // with threads = 1: time spent preempted is not counted)
  int64_t naive_limit_bytes = int64_t(8) << 30;
  FlashProducts products = FlashProducts::automatic;  // the forward's tile products
};

struct AttentionBenchResult {
  double fwd_ms = 0, fwd_gflops = 0;     // flash forward, best of repeats
  double bwd_ms = 0, bwd_gflops = 0;     // flash backward (0 unless config.backward)
  double naive_ms = 0;                   // naive forward; 0 when skipped
  double sgemm_gflops = 0;               // OpenBLAS sgemm (n = 2048) in this run, same threads
  double fwd_flops = 0, bwd_flops = 0;   // unmasked work: 4·D per visible pair per head (fwd), 10·D (bwd)
  int64_t tensor_bytes = 0;              // bytes of q, k, v, out, lse
  int64_t naive_scratch_bytes = 0;       // scores + repeated K/V the naive path needs
  int64_t peak_rss_delta_bytes = 0;      // process peak RSS growth during the first forward
  std::string naive_skipped;             // why the naive path was not run, if it was not
  int threads = 0;                       // threads used
};

// Runs the benchmark; throws attnkit::Error for impossible configurations.
AttentionBenchResult run_attention_bench(const AttentionBenchConfig& config);

}  // namespace attnkit
