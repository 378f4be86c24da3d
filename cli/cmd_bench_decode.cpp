// `attnkit bench decode` and `attnkit bench roofline`: decode time per token against this
// machine's memory bandwidth and FMA peak, all measured in the same run.
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/kv/kv_cache.hpp"
#include "attnkit/tools/decode_bench.hpp"
#include "attnkit/tools/roofline.hpp"
#include "attnkit/ops/gemm.hpp"
#include "commands.hpp"

namespace attnkit::cli {
namespace {

struct DecodeCli {
  DecodeBenchConfig config;
  std::string kv_heads = "8";
  std::string dtype = "f16";
  bool json = false;
  bool warm = false;
};

std::vector<int64_t> parse_list(const std::string& s, const char* name) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    check(used == item.size() && !item.empty(), name, ": expected integers separated by commas, got '", s, "'");
    out.push_back(v);
  }
  check(!out.empty(), name, ": empty list");
  return out;
}

void run_decode(const DecodeCli& cli) {
  const auto hkvs = parse_list(cli.kv_heads, "--kv-heads");
  DecodeBenchConfig c = cli.config;
  c.cold = !cli.warm;
  c.dtype = parse_kv_storage_dtype(cli.dtype, "--dtype");
  ThreadCountScope scope(c.threads);
  const int threads = num_threads();
  const double bw = measure_read_gbps(threads);
  const double fma = measure_fma_gflops(threads);
  nlohmann::json rows = nlohmann::json::array();
  if (!cli.json)
    std::printf("decode: H=%lld D=%lld S=%lld B=%lld %s cache, %d threads; measured read %.1f GB/s, FMA %.0f GFLOP/s\n"
                "  %6s %12s %10s %9s %8s %10s %8s\n",
                (long long)c.heads, (long long)c.head_dim, (long long)c.context, (long long)c.batch,
                cli.dtype.c_str(), threads, bw, fma, "Hkv", "ms/token", "cache MB", "GB/s",
                "of bw", "GFLOP/s", "of FMA");
  for (int64_t hkv : hkvs) {
    c.kv_heads = hkv;
    const DecodeBenchResult r = run_decode_bench(c);
    nlohmann::json j = {{"heads", c.heads}, {"kv_heads", hkv}, {"head_dim", c.head_dim},
                        {"context", c.context}, {"batch", c.batch}, {"dtype", cli.dtype},
                        {"threads", threads}, {"ms_per_token", r.ms_per_token},
                        {"cache_bytes", r.cache_bytes}, {"gbps", r.gbps},
                        {"fraction_of_bandwidth", r.gbps / bw}, {"measured_read_gbps", bw},
                        {"gflops", r.gflops}, {"fraction_of_fma_peak", r.gflops / fma},
                        {"measured_fma_gflops", fma}, {"layers", r.layers},
                        {"cold", c.cold}};
    rows.push_back(j);
    if (!cli.json)
      std::printf("  %6lld %12.3f %10.1f %9.1f %7.0f%% %10.1f %7.0f%%\n", (long long)hkv,
                  r.ms_per_token, double(r.cache_bytes) * 1e-6, r.gbps, 100 * r.gbps / bw,
                  r.gflops, 100 * r.gflops / fma);
  }
  if (cli.json) {
    std::printf("%s\n", (rows.size() == 1 ? rows[0] : rows).dump(2).c_str());
    return;
  }
  if (rows.size() > 1)
    for (size_t i = 1; i < rows.size(); ++i)
      std::printf("  Hkv %lld → %lld: time ratio %.2fx, bytes ratio %.2fx\n",
                  (long long)rows[i - 1]["kv_heads"], (long long)rows[i]["kv_heads"],
                  double(rows[i - 1]["ms_per_token"]) / double(rows[i]["ms_per_token"]),
                  double(rows[i - 1]["cache_bytes"]) / double(rows[i]["cache_bytes"]));
  std::printf("  bytes: one layer's K and V for every cached token; GFLOP/s counts 4·H·D per token\n");
  if (c.cold)
    std::printf("  cold: each call read a layer last touched %lld calls earlier (layers filled: %lld, "
                "together > 2x the last-level cache)\n",
                (long long)(rows.back()["layers"].get<int64_t>() - 1), (long long)rows.back()["layers"].get<int64_t>());
}

}  // namespace

void add_bench_decode_command(CLI::App& bench) {
  auto cli = std::make_shared<DecodeCli>();
  auto* dec = bench.add_subcommand(
      "decode", "Decode time per token against a filled KV cache, vs measured bandwidth and FMA peak");
  auto& c = cli->config;
  dec->add_option("--heads", c.heads, "Query heads (H)")->capture_default_str();
  dec->add_option("--kv-heads", cli->kv_heads, "KV heads, or a comma-separated list (e.g. 32,8,1)")->capture_default_str();
  dec->add_option("--head-dim", c.head_dim, "Head dimension (D)")->capture_default_str();
  dec->add_option("--context", c.context, "Cached tokens per sequence (S)")->capture_default_str();
  dec->add_option("--batch", c.batch, "Sequences decoded together")->capture_default_str();
  dec->add_option("--dtype", cli->dtype, "Cache storage: f32, f16, bf16, int8")->capture_default_str();
  dec->add_option("--threads", c.threads, "Threads (0 = all cores)")->capture_default_str();
  dec->add_option("--repeats", c.repeats, "Timed calls (at least one per layer); the best is reported")->capture_default_str();
  dec->add_flag("--warm", cli->warm,
                "Time one layer over and over (warm in the last-level cache if it fits) instead of "
                "cycling through enough layers to exceed twice that cache");
  dec->add_flag("--json", cli->json, "JSON (keys: ms_per_token, gbps, fraction_of_bandwidth, ...)");
  dec->callback([cli] { run_decode(*cli); });

  auto threads = std::make_shared<int>(0);
  auto json = std::make_shared<bool>(false);
  auto* roof = bench.add_subcommand("roofline", "This machine's FMA peak, memory read bandwidth and sgemm rate");
  roof->add_option("--threads", *threads, "Threads for the all-core figures (0 = all cores)");
  roof->add_flag("--json", *json, "One JSON object");
  roof->callback([threads, json] {
    ThreadCountScope scope(*threads);
    const int n = num_threads();
    const nlohmann::json j = {{"threads", n},
                              {"fma_gflops_1thread", measure_fma_gflops(1)},
                              {"fma_gflops", measure_fma_gflops(n)},
                              {"read_gbps_1thread", measure_read_gbps(1)},
                              {"read_gbps", measure_read_gbps(n)},
                              {"sgemm_gflops", measure_sgemm_gflops(n)},
                              {"blas_kernels", blas_kernels()}};
    if (*json) {
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("roofline of this machine (measured now; shared machines are noisy)\n");
    std::printf("  FMA peak       %7.1f GFLOP/s (1 thread)  %7.1f GFLOP/s (%d threads)\n",
                double(j["fma_gflops_1thread"]), double(j["fma_gflops"]), n);
    std::printf("  memory read    %7.1f GB/s    (1 thread)  %7.1f GB/s    (%d threads)\n",
                double(j["read_gbps_1thread"]), double(j["read_gbps"]), n);
    std::printf("  OpenBLAS sgemm %7.1f GFLOP/s (n = 2048, %d threads)\n", double(j["sgemm_gflops"]), n);
    std::printf("  machine balance %.1f flop/byte\n", double(j["fma_gflops"]) / double(j["read_gbps"]));
    std::printf("  OpenBLAS kernels: %s\n", blas_kernels().c_str());
  });
}

}  // namespace attnkit::cli
