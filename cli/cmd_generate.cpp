// `attnkit generate`: sample text from a GPT with a KV cache (dense, or StreamingLLM sink +
// window), streaming bytes as they are produced, then tokens/s and cache memory on stderr.
// With --tp P under `mpirun -np P`, the model is split over P processes (dist/tp_generate.hpp)
// and every rank's KV-cache bytes are printed next to kv-plan's per-shard prediction.
#include <cstdio>
#include <memory>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/io/tokenizer.hpp"
#include "attnkit/kv/kv_plan.hpp"
#include "attnkit/models/gpt_generate.hpp"
#include "attnkit/models/model_registry.hpp"
#include "attnkit/tools/roofline.hpp"
#include "commands.hpp"
#include "flags.hpp"
#if ATTNKIT_HAVE_MPI
#include "attnkit/dist/mpi.hpp"
#include "attnkit/dist/tp_generate.hpp"
#endif

namespace attnkit::cli {
namespace {

struct GenerateCli {
  std::string model, prompt, cache_dtype = "f32";
  int64_t max_tokens = 200;
  GenerateOptions opts;
  int threads = 0;
  int64_t tp = 1;
  bool no_stop = false;
};

// The generator's options; refuses a cache larger than this machine's memory (naming the flag
// that sized it) before anything is allocated.
GenerateOptions resolve_options(const GenerateCli& cli, const GptConfig& config) {
  GenerateOptions o = cli.opts;
  o.cache_dtype = parse_kv_storage_dtype(cli.cache_dtype, "--cache-dtype");
  check((o.sink_tokens >= 0) == (o.window > 0), "--sink-tokens and --window go together (StreamingLLM cache)");
  if (o.window > 0) {
    check_fits_in_memory(gpt_kv_cache_bytes(config, double(o.window) + double(o.sink_tokens)), "--window",
                         "a KV cache of --sink-tokens + --window tokens");
  } else if (o.capacity == 0) {  // dense: room for prompt + output
    check_fits_in_memory(gpt_kv_cache_bytes(config, double(cli.prompt.size()) + double(cli.max_tokens) + 1),
                         "--max-tokens", "a KV cache of the prompt + --max-tokens tokens");
    o.capacity = int64_t(cli.prompt.size()) + cli.max_tokens + 1;
  }
  return o;
}

// Feeds the prompt and samples up to --max-tokens; prints the text if `print`. Returns
// (tokens produced, seconds).
template <class Generator>
std::pair<int64_t, double> generate_text(Generator& gen, const GenerateCli& cli, bool print) {
  std::vector<int32_t> prompt = ByteTokenizer::encode(cli.prompt);
  prompt.insert(prompt.begin(), ByteTokenizer::kEndOfText);  // documents start after <|endoftext|>
  const double p0 = now_seconds();
  std::span<const float> logits = gen.feed_prompt(prompt);  // batched prefill
  if (print) {
    const double dp = now_seconds() - p0;
    std::fprintf(stderr, "[prompt: %zu tokens in %.3f s: %.0f tokens/s]\n", prompt.size(), dp,
                 double(prompt.size()) / std::max(dp, 1e-9));
    std::fwrite(cli.prompt.data(), 1, cli.prompt.size(), stdout);
  }
  const double t0 = now_seconds();
  int64_t produced = 0;
  for (; produced < cli.max_tokens; ++produced) {
    const int32_t next = gen.sample(logits);
    if (next == ByteTokenizer::kEndOfText && !cli.no_stop) break;
    if (next < 256 && print) {
      const char byte = char(next);
      std::fwrite(&byte, 1, 1, stdout);
      std::fflush(stdout);
    }
    logits = gen.feed(next);
  }
  return {produced, now_seconds() - t0};
}

void run_generate(const GenerateCli& cli) {
  ThreadCountScope threads(cli.threads);
  const GptModel model = GptModel::load(cli.model);
  const GenerateOptions o = resolve_options(cli, model.config());
  GptGenerator gen(model, o);
  const auto [produced, dt] = generate_text(gen, cli, true);
  std::fprintf(stderr, "\n[%lld tokens in %.2f s: %.1f tokens/s; KV cache %s, %lld tokens held, %.2f MiB]\n",
               (long long)produced, dt, produced / std::max(dt, 1e-9),
               gen.cache().config().policy == KVPolicy::sink     ? "sink+window"
               : gen.cache().config().policy == KVPolicy::window ? "window (--sink-tokens 0)"
                                                                 : "dense",
               (long long)gen.cache().cached(0, 0), double(gen.cache().nbytes()) / (1 << 20));
}

#if ATTNKIT_HAVE_MPI
void run_generate_tp_ranks(const GenerateCli& cli, const dist::MpiWorld& world);

void run_generate_tp(const GenerateCli& cli) {
  dist::MpiWorld world;
  try {
    run_generate_tp_ranks(cli, world);
  } catch (const std::exception& e) {
    world.abort_all_if_parallel(e.what());  // the other ranks may wait in a collective
    throw;
  }
}

// Tensor-parallel generation on this rank.
void run_generate_tp_ranks(const GenerateCli& cli, const dist::MpiWorld& world) {
  check(world.size() == cli.tp, "--tp: ", cli.tp, " processes requested but MPI started ", world.size(),
        " (launch with mpirun -np ", cli.tp, ")");
  ThreadCountScope threads(cli.threads);
  const GptModel model = GptModel::load(cli.model);
  const GenerateOptions o = resolve_options(cli, model.config());
  dist::TpGenerator gen(model, o, world.rank(), world.size());
  const auto [produced, dt] = generate_text(gen, cli, world.rank() == 0);
  // Every rank's actual KV bytes and head ranges, gathered to rank 0, against kv-plan --tp.
  const auto& r = gen.range();
  const int64_t mine[5] = {gen.cache().nbytes(), r.head_begin, r.head_end, r.kv_begin, r.kv_end};
  std::vector<int64_t> all(size_t(5 * world.size()));
  dist::gather(mine, all, 0);
  if (world.rank() != 0) return;
  const auto& c = model.config();
  const KVPlanRow plan = kv_plan({.layers = c.num_hidden_layers, .heads = c.num_attention_heads,
                                  .kv_heads = c.num_key_value_heads, .head_dim = c.head_dim,
                                  .dtype = *parse_kv_dtype(cli.cache_dtype)},
                                 {.context = gen.cache().slots_per_sequence(), .tp = cli.tp});
  std::fprintf(stderr, "\n[%lld tokens in %.2f s: %.1f tokens/s over %lld processes]\n", (long long)produced, dt,
               produced / std::max(dt, 1e-9), (long long)cli.tp);
  for (int p = 0; p < world.size(); ++p) {
    const int64_t* a = all.data() + 5 * p;
    std::fprintf(stderr, "[rank %d: query heads %lld-%lld, KV heads %lld-%lld, KV cache %lld bytes (%lld slots)]\n",
                 p, (long long)a[1], (long long)(a[2] - 1), (long long)a[3], (long long)(a[4] - 1), (long long)a[0],
                 (long long)gen.cache().slots_per_sequence());
  }
  std::fprintf(stderr, "[kv-plan --tp %lld: %lld bytes per shard (%lld KV heads per shard, replication %lld)]\n",
               (long long)cli.tp, (long long)plan.shard_bytes_per_sequence, (long long)plan.kv_heads_per_shard,
               (long long)plan.replication);
}
#endif

}  // namespace

void add_generate_command(CLI::App& app) {
  auto cli = std::make_shared<GenerateCli>();
  auto* g = app.add_subcommand("generate", "Sample text from a GPT model with a KV cache");
  g->add_option("--model", cli->model, "Model directory (config.json + model.safetensors)")->required();
  g->add_option("--prompt", cli->prompt, "Text to continue")->capture_default_str();
  g->add_option("--max-tokens", cli->max_tokens, "Tokens to generate at most")->capture_default_str()->check(integer_in(0));
  g->add_option("--temperature", cli->opts.temperature, "Softmax temperature (0 = greedy)")
      ->capture_default_str()->check(number_in(0, 1e6));
  g->add_option("--top-k", cli->opts.top_k, "Sample among the k most likely tokens (0 = off)")
      ->capture_default_str()->check(integer_in(0));
  g->add_option("--top-p", cli->opts.top_p, "Nucleus sampling mass (1 = off)")->capture_default_str()->check(number_in(0, 1, true));
  add_seed_flag(*g, cli->opts.seed, "Sampling seed");
  add_sink_tokens_flag(*g, cli->opts.sink_tokens, "StreamingLLM sink tokens: first tokens the cache keeps for ever (with --window)");
  g->add_option("--window", cli->opts.window, "StreamingLLM: recent tokens kept (with --sink-tokens)")->check(integer_in(1));
  g->add_option("--cache-dtype", cli->cache_dtype, "KV cache storage: f32, f16, bf16, int8")->capture_default_str();
  add_threads_flag(*g, cli->threads);
  g->add_option("--tp", cli->tp,
                "Tensor-parallel processes: run under `mpirun -np P`; rank r holds heads and MLP slice r of P")
      ->capture_default_str()->check(integer_in(1, 4096));
  g->add_flag("--no-stop", cli->no_stop, "Keep going past <|endoftext|> (streaming tests)");
  g->callback([cli] {
    require_model_dir(cli->model, "--model", ModelKind::kGpt, "generate");
    if (cli->tp == 1) return run_generate(*cli);
#if ATTNKIT_HAVE_MPI
    run_generate_tp(*cli);
#else
    fail("--tp: this attnkit was built without MPI (ATTNKIT_MPI=OFF or Open MPI not found)");
#endif
  });
}

}  // namespace attnkit::cli
