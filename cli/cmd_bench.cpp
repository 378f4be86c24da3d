// `attnkit bench attention`: flash attention speed against the naive path and sgemm, measured
// in one run. Timings are best-of-N wall clock on a shared machine: compare ratios, not runs.
#include <cstdio>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/tools/attention_bench.hpp"
#include "commands.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

void print_attention(const AttentionBenchConfig& c, const AttentionBenchResult& r, bool json) {
  const double frac = r.fwd_gflops / r.sgemm_gflops;
  if (json) {
    nlohmann::json j = {
        {"batch", c.batch}, {"heads", c.heads}, {"kv_heads", c.kv_heads},
        {"head_dim", c.head_dim}, {"seq", c.seq}, {"causal", c.causal}, {"alibi", c.alibi},
        {"threads", r.threads}, {"ms", r.fwd_ms}, {"gflops", r.fwd_gflops},
        {"fraction_of_sgemm", frac}, {"sgemm_gflops", r.sgemm_gflops},
        {"naive_ms", r.naive_ms > 0 ? nlohmann::json(r.naive_ms) : nlohmann::json(nullptr)},
        {"speedup_vs_naive", r.naive_ms > 0 ? nlohmann::json(r.naive_ms / r.fwd_ms) : nlohmann::json(nullptr)},
        {"flops", r.fwd_flops}, {"tensor_bytes", r.tensor_bytes},
        {"peak_rss_delta_bytes", r.peak_rss_delta_bytes},
        {"naive_scratch_bytes", r.naive_scratch_bytes}};
    if (!r.naive_skipped.empty()) j["naive_skipped"] = r.naive_skipped;
    if (c.backward) {
      j["backward_ms"] = r.bwd_ms;
      j["backward_gflops"] = r.bwd_gflops;
      j["backward_fraction_of_sgemm"] = r.bwd_gflops / r.sgemm_gflops;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("attention B=%lld L=%lld H=%lld Hkv=%lld D=%lld%s%s, %d threads\n",
              (long long)c.batch, (long long)c.seq, (long long)c.heads, (long long)c.kv_heads,
              (long long)c.head_dim, c.causal ? " causal" : "", c.alibi ? " alibi" : "", r.threads);
  std::printf("  sgemm (n=2048, this run)   %8.1f GFLOP/s\n", r.sgemm_gflops);
  std::printf("  flash forward   %9.2f ms %8.1f GFLOP/s  %5.1f%% of sgemm\n", r.fwd_ms,
              r.fwd_gflops, 100 * frac);
  if (c.backward)
    std::printf("  flash backward  %9.2f ms %8.1f GFLOP/s  %5.1f%% of sgemm\n", r.bwd_ms,
                r.bwd_gflops, 100 * r.bwd_gflops / r.sgemm_gflops);
  if (r.naive_ms > 0)
    std::printf("  naive forward   %9.2f ms   (flash takes %.2fx the naive time; naive needs %.1f MiB of scratch)\n",
                r.naive_ms, r.fwd_ms / r.naive_ms, double(r.naive_scratch_bytes) / (1 << 20));
  else
    std::printf("  naive forward   skipped (%s)\n", r.naive_skipped.c_str());
  std::printf("  memory: q,k,v,out,lse %.1f MiB; peak RSS growth in the forward %.1f MiB\n",
              double(r.tensor_bytes) / (1 << 20), double(r.peak_rss_delta_bytes) / (1 << 20));
  std::printf("  GFLOP/s count unmasked work only: 4·D per visible (query, key) pair per head"
              " forward, 10·D backward\n");
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Measure kernels against this machine's peaks");
  bench->require_subcommand(1);
  auto c = std::make_shared<AttentionBenchConfig>();
  auto json = std::make_shared<bool>(false);
  auto* att = bench->add_subcommand(
      "attention", "Flash attention vs the naive path (scores materialised) and OpenBLAS sgemm");
  att->add_option("--batch", c->batch, "Sequences")->capture_default_str()->check(integer_in(1));
  att->add_option("--seq", c->seq, "Tokens per sequence (L)")->capture_default_str()->check(integer_in(1));
  att->add_option("--heads", c->heads, "Query heads (H)")->capture_default_str()->check(integer_in(1));
  att->add_option("--kv-heads", c->kv_heads, "Key/value heads (Hkv, divides H)")->capture_default_str()->check(integer_in(1));
  att->add_option("--head-dim", c->head_dim, "Head dimension (D)")->capture_default_str()->check(integer_in(1));
  att->add_flag("--causal", c->causal, "Causal mask (only unmasked work is counted)");
  att->add_flag("--alibi", c->alibi, "ALiBi biases with slopes 2^(-8(h+1)/H), flash and naive");
  att->add_flag("--backward", c->backward, "Also time the backward");
  att->add_flag_callback("--no-naive", [c] { c->naive = false; }, "Skip the naive baseline");
  add_threads_flag(*att, c->threads);
  att->add_option("--repeats", c->repeats, "Timed calls; the best is reported")->capture_default_str()->check(integer_in(1, 1000000));
  att->add_flag("--cpu-time", c->cpu_time,
                "Time flash and sgemm on the process's CPU clock (with --threads 1: preempted time on a shared machine is not counted)");
  att->add_option("--tile-products", c->products,
                  "Flash tile products, forward and backward: auto (= packed), packed (attnkit's kernels) or blas (OpenBLAS sgemm per tile)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, FlashProducts>{
          {"auto", FlashProducts::automatic}, {"packed", FlashProducts::packed}, {"blas", FlashProducts::blas}}))
      ->default_str("auto");
  add_json_flag(*att, *json, "One JSON object (keys: ms, gflops, fraction_of_sgemm, naive_ms, ...)");
  att->callback([c, json] {
    // q, out [B·L, H, D], k, v [B·L, Hkv, D], lse [H, B·L] float32; the backward doubles them.
    const double rows = double(c->batch) * double(c->seq);
    const double bytes = rows * 4.0 * (double(2 * c->heads + 2 * c->kv_heads) * double(c->head_dim) + double(c->heads));
    check_fits_in_memory(bytes * (c->backward ? 2 : 1), "--batch, --seq, --heads, --head-dim", "q, k, v and out");
    print_attention(*c, run_attention_bench(*c), *json);
  });
  add_bench_decode_command(*bench);
  add_bench_generate_command(*bench);
  add_bench_deformable_command(*bench);
}

}  // namespace attnkit::cli
