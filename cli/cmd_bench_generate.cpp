// `attnkit bench generate`: a model's decode time per token at a long context. The cache is filled
// with random keys and values up to --context (decode cost depends on the cache, not on its
// contents), then --tokens greedy steps are timed; the median step is reported.
#include <algorithm>
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/models/gpt_generate.hpp"
#include "attnkit/models/model_registry.hpp"
#include "attnkit/tools/roofline.hpp"
#include "commands.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

struct BenchGenerateCli {
  std::string model, dtype = "f32";
  int64_t context = 16384, tokens = 32;
  int threads = 0;
  bool json = false;
};

void run_bench_generate(const BenchGenerateCli& cli) {
  require_model_dir(cli.model, "--model", ModelKind::kGpt, "bench generate");
  ThreadCountScope scope(cli.threads);
  check(cli.context >= 0, "--context: must be >= 0");
  check(cli.tokens >= 1, "--tokens: must be >= 1");
  const GptModel model = GptModel::load(cli.model);
  check_fits_in_memory(gpt_kv_cache_bytes(model.config(), double(cli.context) + double(cli.tokens)), "--context",
                       "a KV cache of --context + --tokens tokens");
  GptGenerator gen(model, {.capacity = cli.context + cli.tokens,
                           .cache_dtype = parse_kv_storage_dtype(cli.dtype, "--dtype"), .temperature = 0});
  gen.fill_cache_random(cli.context, 1);
  std::vector<double> ms;
  int32_t token = 0;
  for (int64_t i = 0; i < cli.tokens; ++i) {
    const double t0 = now_seconds();
    token = gen.sample(gen.feed(token));
    ms.push_back(1e3 * (now_seconds() - t0));
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  const auto& c = model.config();
  const nlohmann::json j = {{"model", cli.model}, {"context", cli.context}, {"tokens", cli.tokens},
                            {"kv_heads", c.num_key_value_heads}, {"heads", c.num_attention_heads},
                            {"threads", num_threads()}, {"dtype", cli.dtype}, {"ms_per_token", median},
                            {"cache_bytes", gen.cache().nbytes()}};
  if (cli.json)
    std::printf("%s\n", j.dump(2).c_str());
  else
    std::printf("decode at context %lld: %.3f ms/token (median of %lld), H=%lld Hkv=%lld, cache %.1f MiB, %d threads\n",
                (long long)cli.context, median, (long long)cli.tokens, (long long)c.num_attention_heads,
                (long long)c.num_key_value_heads, double(gen.cache().nbytes()) / (1 << 20), num_threads());
}

}  // namespace

void add_bench_generate_command(CLI::App& bench) {
  auto cli = std::make_shared<BenchGenerateCli>();
  auto* g = bench.add_subcommand("generate", "A model's decode ms/token with the KV cache filled to --context");
  g->add_option("--model", cli->model, "Model directory (config.json + model.safetensors)")->required();
  g->add_option("--context", cli->context, "Cached tokens before the timed steps")->capture_default_str()->check(integer_in(0));
  g->add_option("--tokens", cli->tokens, "Timed decode steps (the median is reported)")
      ->capture_default_str()->check(integer_in(1, 1000000));
  g->add_option("--dtype", cli->dtype, "Cache storage: f32, f16, bf16, int8")->capture_default_str();
  add_threads_flag(*g, cli->threads);
  add_json_flag(*g, cli->json, "One JSON object (ms_per_token, cache_bytes, ...)");
  g->callback([cli] { run_bench_generate(*cli); });
}

}  // namespace attnkit::cli
