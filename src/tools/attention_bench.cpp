// `attnkit bench attention`: times flash attention (and its backward) against the naive path and
// OpenBLAS sgemm in the same process, with random inputs.
#include "attnkit/tools/attention_bench.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <vector>

#include "attnkit/attention/attention_naive.hpp"
#include "attnkit/attention/flash_attention.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/tools/roofline.hpp"

namespace attnkit {
namespace {

int64_t current_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * 4096;
}

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  return x;
}


}  // namespace

AttentionBenchResult run_attention_bench(const AttentionBenchConfig& c) {
  check(c.batch >= 1 && c.seq >= 1 && c.heads >= 1 && c.kv_heads >= 1 && c.head_dim >= 1,
        "bench: batch, seq, heads, kv-heads and head-dim must be >= 1");
  check(c.heads % c.kv_heads == 0, "--kv-heads: ", c.kv_heads, " must divide --heads ", c.heads);
  check(c.repeats >= 1, "--repeats: must be >= 1");
  ThreadCountScope threads(c.threads);
  AttentionBenchResult r;
  const int64_t t = c.batch * c.seq, h = c.heads, hkv = c.kv_heads, d = c.head_dim;
  const int64_t rss_before = std::max(current_rss_bytes(), peak_rss_bytes());
  const auto q = random_floats(t * h * d, 1), k = random_floats(t * hkv * d, 2),
             v = random_floats(t * hkv * d, 3);
  std::vector<float> out(q.size()), lse(static_cast<size_t>(h * t));
  std::vector<int32_t> cu;
  for (int64_t b = 0; b <= c.batch; ++b) cu.push_back(int32_t(b * c.seq));
  std::vector<float> slopes;
  for (int64_t hh = 0; c.alibi && hh < h; ++hh)
    slopes.push_back(std::exp2(-8.0f * float(hh + 1) / float(h)));
  AttentionArgs args{.q = ConstView3::contiguous(q.data(), {t, h, d}),
                     .k = ConstView3::contiguous(k.data(), {t, hkv, d}),
                     .v = ConstView3::contiguous(v.data(), {t, hkv, d}),
                     .cu_seqlens_q = cu,
                     .cu_seqlens_k = cu,
                     .alibi_slopes = slopes,
                     .out = View3::contiguous(out.data(), {t, h, d}),
                     .lse = View2::contiguous(lse.data(), {h, t})};
  const AttentionOptions opts = c.causal ? AttentionOptions::causal() : AttentionOptions{};
  r.tensor_bytes = int64_t(sizeof(float)) * (2 * t * h * d + 2 * t * hkv * d + h * t);

  flash_attention(opts, args);  // warm-up; also the memory probe
  r.peak_rss_delta_bytes = peak_rss_bytes() - rss_before;
  r.fwd_ms = 1e3 * best_of(c.repeats, [&] { flash_attention(opts, args); });
  double pairs = 0;
  for (int64_t i = 0; i < c.seq; ++i) {
    const KeyRange kr = visible_keys(opts, i, c.seq, c.seq);
    pairs += double(kr.hi - kr.lo);
  }
  pairs *= double(c.batch * h);
  r.fwd_flops = 4.0 * double(d) * pairs;
  r.bwd_flops = 10.0 * double(d) * pairs;
  r.fwd_gflops = r.fwd_flops / (r.fwd_ms * 1e6);
  if (c.backward) {
    const auto d_out = random_floats(t * h * d, 4);
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    AttentionGrads g{.d_out = ConstView3::contiguous(d_out.data(), {t, h, d}),
                     .d_q = View3::contiguous(dq.data(), {t, h, d}),
                     .d_k = View3::contiguous(dk.data(), {t, hkv, d}),
                     .d_v = View3::contiguous(dv.data(), {t, hkv, d})};
    flash_attention_backward(opts, args, g);
    r.bwd_ms = 1e3 * best_of(c.repeats, [&] { flash_attention_backward(opts, args, g); });
    r.bwd_gflops = r.bwd_flops / (r.bwd_ms * 1e6);
  }
  r.naive_scratch_bytes = attention_naive_bytes(args);
  if (!c.naive) {
    r.naive_skipped = "disabled";
  } else if (r.naive_scratch_bytes > c.naive_limit_bytes) {
    r.naive_skipped = "needs " + std::to_string(r.naive_scratch_bytes >> 20) + " MiB of scores";
  } else {
    std::vector<float> out2(out.size());
    AttentionArgs naive_args = args;
    naive_args.out = View3::contiguous(out2.data(), {t, h, d});
    naive_args.lse = {};
    attention_naive(opts, naive_args);
    r.naive_ms = 1e3 * best_of(c.repeats, [&] { attention_naive(opts, naive_args); });
  }
  r.threads = num_threads();
  r.sgemm_gflops = measure_sgemm_gflops(r.threads);
  return r;
}

}  // namespace attnkit
