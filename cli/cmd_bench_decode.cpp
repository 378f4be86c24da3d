// `attnkit bench decode` and `attnkit bench roofline`: decode time per token against this
// machine's memory bandwidth and FMA peak, all measured in the same run.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/kv/kv_cache.hpp"
#include "attnkit/tools/build_info.hpp"
#include "attnkit/tools/decode_bench.hpp"
#include "attnkit/tools/roofline.hpp"
#include "attnkit/ops/gemm.hpp"
#include "commands.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

struct DecodeCli {
  DecodeBenchConfig config;
  std::string kv_heads = "8";
  std::string dtype = "f16";
  bool json = false;
  bool warm = false;
  int rounds = 1;
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void run_decode(const DecodeCli& cli) {
  const auto hkvs = parse_list(cli.kv_heads, "--kv-heads");
  check(cli.rounds >= 1, "--rounds: must be >= 1");
  DecodeBenchConfig c = cli.config;
  c.cold = !cli.warm;
  c.dtype = parse_kv_storage_dtype(cli.dtype, "--dtype");
  check(c.repeats >= 1, "--repeats: must be >= 1");
  for (int64_t hkv : hkvs) {
    check(hkv >= 1 && c.heads % hkv == 0, "--kv-heads: ", hkv, " must be >= 1 and divide --heads ", c.heads);
    // one layer's K and V: batch x context tokens of Hkv x D values (4 bytes at most)
    check_fits_in_memory(2.0 * double(c.batch) * double(c.context) * double(hkv) * double(c.head_dim) * 4,
                         "--batch, --context", "one layer's KV cache");
  }
  ThreadCountScope scope(c.threads);
  const int threads = num_threads();
  // Every shape's cache is filled first; then each round measures the read bandwidth and the FMA
  // peak and times every shape once, so a load change on a shared machine hits them alike.
  std::vector<std::unique_ptr<DecodeBench>> benches;
  for (int64_t hkv : hkvs) {
    c.kv_heads = hkv;
    benches.push_back(std::make_unique<DecodeBench>(c));
  }
  const size_t n = hkvs.size();
  std::vector<double> bws, fmas;
  std::vector<std::vector<DecodeBenchResult>> res(n);
  for (int round = 0; round < cli.rounds; ++round) {
    bws.push_back(measure_read_gbps(threads));
    fmas.push_back(measure_fma_gflops(threads));
    for (size_t i = 0; i < n; ++i) res[i].push_back(benches[i]->time(c.repeats));
  }
  // Per shape: medians over rounds of the time and of the fractions of that round's probes.
  auto over_rounds = [&](size_t i, auto&& f) {
    std::vector<double> v;
    for (int r = 0; r < cli.rounds; ++r) v.push_back(f(res[i][size_t(r)], size_t(r)));
    return median(v);
  };
  const double bw = median(bws), fma = median(fmas);
  nlohmann::json rows = nlohmann::json::array();
  if (!cli.json) {
    std::printf("decode: H=%lld D=%lld S=%lld B=%lld %s cache, %d threads; measured read %.1f GB/s, FMA %.0f GFLOP/s%s\n"
                "  %6s %12s %10s %9s %8s %10s %8s\n",
                (long long)c.heads, (long long)c.head_dim, (long long)c.context, (long long)c.batch,
                cli.dtype.c_str(), threads, bw, fma, cli.rounds > 1 ? " (medians of the rounds)" : "",
                "Hkv", "ms/token", "cache MB", "GB/s", "of bw", "GFLOP/s", "of FMA");
  }
  for (size_t i = 0; i < n; ++i) {
    const double ms = over_rounds(i, [](const DecodeBenchResult& r, size_t) { return r.ms_per_token; });
    const double of_bw = over_rounds(i, [&](const DecodeBenchResult& r, size_t k) { return r.gbps / bws[k]; });
    const double of_fma = over_rounds(i, [&](const DecodeBenchResult& r, size_t k) { return r.gflops / fmas[k]; });
    const DecodeBenchResult& r0 = res[i][0];
    const double gbps = double(r0.cache_bytes) / ms * 1e-6, gflops = r0.gflops * r0.ms_per_token / ms;
    nlohmann::json j = {{"heads", c.heads}, {"kv_heads", hkvs[i]}, {"head_dim", c.head_dim},
                        {"context", c.context}, {"batch", c.batch}, {"dtype", cli.dtype},
                        {"threads", threads}, {"rounds", cli.rounds}, {"ms_per_token", ms},
                        {"cache_bytes", r0.cache_bytes}, {"gbps", gbps},
                        {"fraction_of_bandwidth", of_bw}, {"measured_read_gbps", bw},
                        {"gflops", gflops}, {"fraction_of_fma_peak", of_fma},
                        {"measured_fma_gflops", fma}, {"layers", r0.layers},
                        {"cold", c.cold}, {"cpu_time", c.cpu_time}};
    if (i > 0)  // median over rounds of the previous shape's time over this one's, same round
      j["time_ratio_to_previous"] = over_rounds(i, [&](const DecodeBenchResult& r, size_t k) {
        return res[i - 1][k].ms_per_token / r.ms_per_token;
      });
    rows.push_back(j);
    if (!cli.json)
      std::printf("  %6lld %12.3f %10.1f %9.1f %7.0f%% %10.1f %7.0f%%\n", (long long)hkvs[i], ms,
                  double(r0.cache_bytes) * 1e-6, gbps, 100 * of_bw, gflops, 100 * of_fma);
  }
  if (cli.json) {
    std::printf("%s\n", (rows.size() == 1 ? rows[0] : rows).dump(2).c_str());
    return;
  }
  for (size_t i = 1; i < n; ++i)
    std::printf("  Hkv %lld → %lld: time ratio %.2fx, bytes ratio %.2fx\n", (long long)hkvs[i - 1],
                (long long)hkvs[i], double(rows[i]["time_ratio_to_previous"]),
                double(rows[i - 1]["cache_bytes"]) / double(rows[i]["cache_bytes"]));
  std::printf("  bytes: one layer's K and V for every cached token; GFLOP/s counts 4·H·D per token\n");
  if (cli.rounds > 1)
    std::printf("  rounds: %d; each measured bandwidth and FMA peak, then timed every Hkv once (best of %d "
                "calls); ms are medians over rounds, %% of bw/FMA and time ratios medians of per-round values\n",
                cli.rounds, c.repeats);
  if (c.cpu_time)
    std::printf("  times: the process's CPU clock (all threads); the bandwidth and FMA probes use the wall clock\n");
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
  dec->add_option("--heads", c.heads, "Query heads (H)")->capture_default_str()->check(integer_in(1));
  dec->add_option("--kv-heads", cli->kv_heads, "KV heads, or a comma-separated list (e.g. 32,8,1)")->capture_default_str();
  dec->add_option("--head-dim", c.head_dim, "Head dimension (D)")->capture_default_str()->check(integer_in(1));
  dec->add_option("--context", c.context, "Cached tokens per sequence (S)")->capture_default_str()->check(integer_in(1));
  dec->add_option("--batch", c.batch, "Sequences decoded together")->capture_default_str()->check(integer_in(1));
  dec->add_option("--dtype", cli->dtype, "Cache storage: f32, f16, bf16, int8")->capture_default_str();
  add_threads_flag(*dec, c.threads);
  dec->add_option("--repeats", c.repeats, "Timed calls (at least one per layer); the best is reported")
      ->capture_default_str()->check(integer_in(1, 1000000));
  dec->add_option("--rounds", cli->rounds,
                  "Rounds: each re-measures bandwidth and FMA peak, then times every --kv-heads value "
                  "once; with more than one, the table gives medians over rounds (robust on a shared "
                  "machine)")->capture_default_str()->check(integer_in(1, 1000));
  dec->add_flag("--warm", cli->warm,
                "Time one layer over and over (warm in the last-level cache if it fits) instead of "
                "cycling through enough layers to exceed twice that cache");
  dec->add_flag("--cpu-time", c.cpu_time,
                "Time each call by the process's CPU clock (all threads) instead of the wall clock: "
                "robust against other processes on a shared machine; meant for --threads 1");
  add_json_flag(*dec, cli->json, "JSON (keys: ms_per_token, gbps, fraction_of_bandwidth, ...)");
  dec->callback([cli] { run_decode(*cli); });

  auto threads = std::make_shared<int>(0);
  auto json = std::make_shared<bool>(false);
  auto* roof = bench.add_subcommand("roofline", "This machine's FMA peak, memory read bandwidth and sgemm rate");
  add_threads_flag(*roof, *threads);
  add_json_flag(*roof, *json, "One JSON object");
  roof->callback([threads, json] {
    ThreadCountScope scope(*threads);
    const int n = num_threads();
    nlohmann::json j = {{"threads", n},
                              {"fma_gflops_1thread", measure_fma_gflops(1)},
                              {"fma_gflops", measure_fma_gflops(n)},
                              {"read_gbps_1thread", measure_read_gbps(1)},
                              {"read_gbps", measure_read_gbps(n)},
                              {"read_gbps_1stream", measure_read_gbps(n, 0, 1)},
                              {"sgemm_gflops", measure_sgemm_gflops(n)},
                              {"blas_kernels", blas_kernels()}};
    const BuildInfo info = build_info();
    j["threads_source"] = info.threads_source;
    j["blas_library"] = info.blas_library;
    j["blas_threads"] = info.blas_threads;
    j["simd"] = info.simd;
    if (*json) {
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("roofline of this machine (measured now; shared machines are noisy)\n");
    std::printf("  FMA peak       %7.1f GFLOP/s (1 thread)  %7.1f GFLOP/s (%d threads)\n",
                double(j["fma_gflops_1thread"]), double(j["fma_gflops"]), n);
    std::printf("  memory read    %7.1f GB/s    (1 thread)  %7.1f GB/s    (%d threads; 4 streams per thread)\n",
                double(j["read_gbps_1thread"]), double(j["read_gbps"]), n);
    std::printf("  one stream per thread: %.1f GB/s (%d threads)\n", double(j["read_gbps_1stream"]), n);
    std::printf("  OpenBLAS sgemm %7.1f GFLOP/s (n = 2048, %d threads)\n", double(j["sgemm_gflops"]), n);
    std::printf("  machine balance %.1f flop/byte\n", double(j["fma_gflops"]) / double(j["read_gbps"]));
    std::printf("  OpenBLAS kernels: %s\n", blas_kernels().c_str());
    std::printf("  BLAS library: %s\n", info.blas_library.c_str());
    std::printf("  attnkit threads: %d (from %s); compiled for %s\n", n,
                *threads > 0 ? "--threads" : info.threads_source.c_str(), info.simd.c_str());
  });
}

}  // namespace attnkit::cli
