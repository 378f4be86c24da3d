// `attnkit bench attention`: times flash attention (and its backward) against the naive path and
// OpenBLAS sgemm in the same process, with random inputs. Each timed flash call is followed by a
// timed 2048³ sgemm (alternating rounds, best of each), so both see the same machine load.
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
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/gemm_onednn.hpp"
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

// Best of `repeats` timings of f in ms on the run's clock; `between` runs untimed after each call.
template <class F, class G>
double best_ms(int repeats, bool cpu_time, F&& f, G&& between) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = bench_seconds(cpu_time);
    f();
    best = std::min(best, (bench_seconds(cpu_time) - t0) * 1e3);
    between();
  }
  return best;
}

}  // namespace

AttentionBenchResult run_attention_bench(const AttentionBenchConfig& c) {
  check(c.batch >= 1 && c.seq >= 1 && c.heads >= 1 && c.kv_heads >= 1 && c.head_dim >= 1,
        "bench: batch, seq, heads, kv-heads and head-dim must be >= 1");
  check(c.heads % c.kv_heads == 0, "--kv-heads: ", c.kv_heads, " must divide --heads ", c.heads);
  check(c.repeats >= 1, "--repeats: must be >= 1");
  ThreadCountScope threads(c.threads);
  FlashProductsScope products(c.products);
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
  // The sgemm probe: one n³ product after each timed flash call; its best rate is the reference.
  const int64_t n = 2048;
  std::vector<float> ga(static_cast<size_t>(n * n), 0.5f), gb(ga.size(), 0.25f), gc(ga.size());
  double sgemm_best_ms = 1e300;
  auto sgemm_round = [&] {
    BlasThreadsScope blas(num_threads());
    const SgemmPathScope openblas(SgemmPath::kOpenBlas);  // the OpenBLAS rate at 1 thread too
    sgemm_best_ms = std::min(sgemm_best_ms, best_ms(
        1, c.cpu_time,
        [&] { sgemm(false, false, n, n, n, 1.0f, ga.data(), n, gb.data(), n, 0.0f, gc.data(), n); },
        [] {}));
  };
  sgemm_round();  // warm-up
  sgemm_best_ms = 1e300;
  r.fwd_ms = best_ms(c.repeats, c.cpu_time, [&] { flash_attention(opts, args); }, sgemm_round);
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
    r.bwd_ms = best_ms(c.repeats, c.cpu_time, [&] { flash_attention_backward(opts, args, g); },
                       sgemm_round);
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
    r.naive_ms = best_ms(c.repeats, c.cpu_time, [&] { attention_naive(opts, naive_args); }, [] {});
  }
  r.threads = num_threads();
  r.sgemm_gflops = 2.0 * double(n) * double(n) * double(n) / (sgemm_best_ms * 1e6);
  return r;
}

}  // namespace attnkit
