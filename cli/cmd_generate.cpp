// `attnkit generate`: sample text from a GPT with a KV cache (dense, or StreamingLLM sink +
// window), streaming bytes as they are produced, then tokens/s and cache memory on stderr.
#include <cstdio>
#include <memory>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/io/tokenizer.hpp"
#include "attnkit/models/gpt_generate.hpp"
#include "attnkit/tools/roofline.hpp"
#include "commands.hpp"

namespace attnkit::cli {
namespace {

struct GenerateCli {
  std::string model, prompt, cache_dtype = "f32";
  int64_t max_tokens = 200;
  GenerateOptions opts;
  int threads = 0;
  bool no_stop = false;
};

void run_generate(const GenerateCli& cli) {
  ThreadCountScope threads(cli.threads);
  const GptModel model = GptModel::load(cli.model);
  GenerateOptions o = cli.opts;
  o.cache_dtype = parse_kv_storage_dtype(cli.cache_dtype, "--cache-dtype");
  check(cli.max_tokens >= 0, "--max-tokens: must be >= 0");
  if (o.n_sink < 0 && o.window <= 0 && o.capacity == 0)  // dense: room for prompt + output
    o.capacity = int64_t(cli.prompt.size()) + cli.max_tokens + 1;
  check((o.n_sink >= 0) == (o.window > 0), "--sink and --window go together (StreamingLLM cache)");
  GptGenerator gen(model, o);
  std::vector<int32_t> prompt = ByteTokenizer::encode(cli.prompt);
  prompt.insert(prompt.begin(), ByteTokenizer::kEndOfText);  // documents start after <|endoftext|>
  std::span<const float> logits;
  for (int32_t t : prompt) logits = gen.feed(t);
  std::fwrite(cli.prompt.data(), 1, cli.prompt.size(), stdout);
  const double t0 = now_seconds();
  int64_t produced = 0;
  for (; produced < cli.max_tokens; ++produced) {
    const int32_t next = gen.sample(logits);
    if (next == ByteTokenizer::kEndOfText && !cli.no_stop) break;
    if (next < 256) {
      const char byte = char(next);
      std::fwrite(&byte, 1, 1, stdout);
      std::fflush(stdout);
    }
    logits = gen.feed(next);
  }
  const double dt = now_seconds() - t0;
  std::fprintf(stderr, "\n[%lld tokens in %.2f s: %.1f tokens/s; KV cache %s, %lld tokens held, %.2f MiB]\n",
               (long long)produced, dt, produced / std::max(dt, 1e-9),
               gen.cache().config().policy == KVPolicy::sink     ? "sink+window"
               : gen.cache().config().policy == KVPolicy::window ? "window (--sink 0)"
                                                                 : "dense",
               (long long)gen.cache().cached(0, 0), double(gen.cache().nbytes()) / (1 << 20));
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto cli = std::make_shared<GenerateCli>();
  auto* g = app.add_subcommand("generate", "Sample text from a GPT model with a KV cache");
  g->add_option("--model", cli->model, "Model directory (config.json + model.safetensors)")->required();
  g->add_option("--prompt", cli->prompt, "Text to continue")->capture_default_str();
  g->add_option("--max-tokens", cli->max_tokens, "Tokens to generate at most")->capture_default_str();
  g->add_option("--temperature", cli->opts.temperature, "Softmax temperature (0 = greedy)")->capture_default_str();
  g->add_option("--top-k", cli->opts.top_k, "Sample among the k most likely tokens (0 = off)")->capture_default_str();
  g->add_option("--top-p", cli->opts.top_p, "Nucleus sampling mass (1 = off)")->capture_default_str();
  g->add_option("--seed", cli->opts.seed, "Sampling seed")->capture_default_str();
  g->add_option("--sink", cli->opts.n_sink, "StreamingLLM: first tokens kept forever (with --window)");
  g->add_option("--window", cli->opts.window, "StreamingLLM: recent tokens kept (with --sink)");
  g->add_option("--cache-dtype", cli->cache_dtype, "KV cache storage: f32, f16, bf16, int8")->capture_default_str();
  g->add_option("--threads", cli->threads, "Threads (0 = all cores)")->capture_default_str();
  g->add_flag("--no-stop", cli->no_stop, "Keep going past <|endoftext|> (streaming tests)");
  g->callback([cli] { run_generate(*cli); });
}

}  // namespace attnkit::cli
