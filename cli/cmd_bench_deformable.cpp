// `attnkit bench deformable`: multi-scale deformable attention (O(N·K)) against dense flash
// attention (O(N²)) over the same N tokens, one run: times, rates against this run's measured
// bandwidth and sgemm, log-log slopes and the crossover N.
#include <cmath>
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "attnkit/tools/deformable_bench.hpp"
#include "commands.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

void print(const DeformableBenchConfig& c, const DeformableBenchResult& r, bool json) {
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : r.rows) {
      nlohmann::json j = {{"n", row.n}, {"deform_ms", row.deform_ms}, {"dense_ms", row.dense_ms},
                          {"deform_gbps", row.deform_gbps},
                          {"deform_fraction_of_read_bandwidth", row.deform_gbps / r.read_gbps},
                          {"dense_gflops", row.dense_gflops},
                          {"dense_fraction_of_sgemm", row.dense_gflops / r.sgemm_gflops}};
      if (c.backward) {
        j["deform_backward_ms"] = row.deform_bwd_ms;
        j["dense_backward_ms"] = row.dense_bwd_ms;
      }
      rows.push_back(j);
    }
    const nlohmann::json j = {
        {"heads", c.heads}, {"head_dim", c.head_dim}, {"levels", c.levels},
        {"points", c.points}, {"uniform", c.uniform}, {"threads", r.threads}, {"read_gbps", r.read_gbps},
        {"sgemm_gflops", r.sgemm_gflops}, {"rows", rows}, {"fit_min_n", c.fit_min_n},
        {"deform_slope", r.deform_fit.slope}, {"dense_slope", r.dense_fit.slope},
        {"crossover_n", r.crossover_n}, {"first_faster_n", r.first_faster_n}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("deformable vs dense attention: H=%lld Dh=%lld, K = Lv·P = %lld·%lld = %lld points"
              " per query and head (%s), %d threads\n",
              (long long)c.heads, (long long)c.head_dim, (long long)c.levels,
              (long long)c.points, (long long)(c.levels * c.points),
              c.uniform ? "uniform locations" : "near the query", r.threads);
  std::printf("  this run: memory read %.1f GB/s, sgemm %.1f GFLOP/s\n", r.read_gbps,
              r.sgemm_gflops);
  std::printf("  %8s %12s %9s %7s %12s %9s %7s %9s", "N", "deform ms", "GB/s", "%read", "dense ms",
              "GFLOP/s", "%sgemm", "dense/def");
  if (c.backward) std::printf(" %12s %12s", "def bwd ms", "dense bwd ms");
  std::printf("\n");
  for (const auto& row : r.rows) {
    std::printf("  %8lld %12.4f %9.1f %6.0f%% %12.4f %9.1f %6.0f%% %9.2f", (long long)row.n,
                row.deform_ms, row.deform_gbps, 100 * row.deform_gbps / r.read_gbps, row.dense_ms,
                row.dense_gflops, 100 * row.dense_gflops / r.sgemm_gflops,
                row.dense_ms / row.deform_ms);
    if (c.backward) std::printf(" %12.4f %12.4f", row.deform_bwd_ms, row.dense_bwd_ms);
    std::printf("\n");
  }
  std::printf("  log-log slope of time vs N (N >= %lld): deformable %.2f, dense %.2f\n",
              (long long)c.fit_min_n, r.deform_fit.slope, r.dense_fit.slope);
  if (r.crossover_n > 0)
    std::printf("  fitted lines cross at N = %.0f (deformable faster above)\n", r.crossover_n);
  if (r.first_faster_n > 0)
    std::printf("  smallest measured N where deformable is faster: %lld\n",
                (long long)r.first_faster_n);
  else
    std::printf("  deformable was not faster at any measured N\n");
  std::printf("  N = Σ H_l·W_l over Lv levels halving a side of --sides; every token is a query."
              " GB/s: gathered corner rows (4·Dh floats per point), mostly cache hits, so it can"
              " exceed DRAM bandwidth. Dense GFLOP/s: 4·Dh·N² per head.\n");
}

}  // namespace

void add_bench_deformable_command(CLI::App& bench) {
  auto c = std::make_shared<DeformableBenchConfig>();
  auto json = std::make_shared<bool>(false);
  auto* cmd = bench.add_subcommand(
      "deformable", "Multi-scale deformable attention vs dense flash attention: time vs N");
  cmd->add_option("--sides", c->sides, "Finest level's side per size, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(integer_in(1, 4096));
  cmd->add_option("--heads", c->heads, "Heads (H)")->capture_default_str()->check(integer_in(1, 4096));
  cmd->add_option("--head-dim", c->head_dim, "Head dimension (Dh)")->capture_default_str()->check(integer_in(1, 65536));
  cmd->add_option("--levels", c->levels, "Feature-map levels (Lv)")->capture_default_str()->check(integer_in(1, 16));
  cmd->add_option("--points", c->points, "Points per level (P)")->capture_default_str()->check(integer_in(1, 1024));
  cmd->add_flag("--backward", c->backward, "Also time both backwards");
  cmd->add_flag("--uniform", c->uniform,
                "Sampling locations uniform over each map (no locality) instead of near the query");
  cmd->add_option("--fit-min-n", c->fit_min_n, "Fit slopes over N >= this")->capture_default_str()->check(integer_in(0));
  add_threads_flag(*cmd, c->threads);
  cmd->add_option("--repeats", c->repeats, "Timings per size; the best is reported")
      ->capture_default_str()->check(integer_in(1, 1000000));
  cmd->add_option("--min-seconds", c->min_seconds, "Loop each timed call at least this long")
      ->capture_default_str()->check(number_in(0, 3600));
  add_json_flag(*cmd, *json, "One JSON object (keys: rows, deform_slope, dense_slope, crossover_n, ...)");
  cmd->callback([c, json] { print(*c, run_deformable_bench(*c), *json); });
}

}  // namespace attnkit::cli
