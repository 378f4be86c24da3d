// `attnkit demo`: what the library does on this machine, in a few minutes and with no options.
// Every number it prints is measured in this run (or computed exactly, for the KV-cache plan):
//   1. the KV-cache plan of a 70B-shaped model under MHA / GQA / MQA;
//   2. flash vs naive attention: time and memory at growing lengths;
//   3. this machine's roofline (FMA peak, memory read bandwidth, OpenBLAS sgemm);
//   4. decode time per token for Hkv = 32 / 8 / 1 against a filled f16 cache;
//   5. a short GQA GPT training run on Debian's fortunes, with a progress bar;
//   6. streaming generation with the StreamingLLM sink cache, far past the training context.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/io/text_corpus.hpp"
#include "attnkit/io/tokenizer.hpp"
#include "attnkit/kv/kv_plan.hpp"
#include "attnkit/models/gpt_generate.hpp"
#include "attnkit/tools/attention_bench.hpp"
#include "attnkit/tools/decode_bench.hpp"
#include "attnkit/tools/roofline.hpp"
#include "attnkit/train/gpt_trainer.hpp"
#include "attnkit/train/run_dir.hpp"
#include "commands.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

struct DemoCli {
  std::string out = "runs/demo";
  int64_t train_steps = 1500;
  int64_t stream_tokens = 4096;
  int threads = 0;
  bool quick = false;  // tiny sizes: checks the demo runs end to end (figures not meaningful)
};

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGB = 1e9;

void section(const char* title) { std::printf("\n== %s\n", title); }

void demo_kv_plan() {
  section("1. KV-cache memory of a 70B-shaped model (80 layers, 64 query heads, D = 128, f16)");
  const KVPreset p = *kv_preset("llama3-70b");
  KVPlanOptions o;
  o.context = p.context;
  const KVPlanVariants v = kv_plan_variants(p.shape, o);
  std::printf("  context %lld tokens, one sequence; one 80 GB device\n", (long long)p.context);
  std::printf("  %-5s %4s %14s %16s %22s\n", "", "Hkv", "KB per token", "GB per sequence",
              "sequences in 80 GB");
  const auto row = [](const char* name, const KVPlanRow& r) {
    std::printf("  %-5s %4lld %14.1f %16.2f %22lld\n", name, (long long)r.kv_heads,
                r.bytes_per_token / 1e3, r.bytes_per_sequence / kGB, (long long)r.sequences_in_budget);
  };
  row("MHA", v.mha);
  row("GQA", v.given);
  row("MQA", v.mqa);
  std::printf("  GQA stores %.0fx less than MHA; decoding reads it all once per token\n",
              double(v.mha.bytes_per_token) / double(v.given.bytes_per_token));
}

void demo_roofline(int threads) {
  section("3. This machine's roofline (measured now)");
  const double fma = measure_fma_gflops(threads), bw = measure_read_gbps(threads),
               gemm = measure_sgemm_gflops(threads);
  std::printf("  %d threads: FMA peak %.0f GFLOP/s, memory read %.1f GB/s, OpenBLAS sgemm %.0f GFLOP/s"
              " (%.0f%% of FMA peak)\n",
              threads, fma, bw, gemm, 100 * gemm / fma);
  std::printf("  balance %.1f flop per byte: kernels doing less work per byte wait on memory\n", fma / bw);
}

void demo_attention(bool quick) {
  section("2. Flash vs naive attention (H = 8, Hkv = 2, D = 64, causal, forward)");
  int64_t lengths[] = {512, 1024, 2048, 4096};
  if (quick)
    for (auto& l : lengths) l /= 8;
  // Flash first at growing lengths, so each peak-RSS reading is not hidden by a naive run's.
  double flash_rss[4] = {};
  for (int i = 0; i < 4; ++i) {
    AttentionBenchConfig c{.heads = 8, .kv_heads = 2, .head_dim = 64, .seq = lengths[i],
                           .causal = true, .naive = false, .repeats = 2};
    flash_rss[i] = double(run_attention_bench(c).peak_rss_delta_bytes) / kMiB;
  }
  std::printf("  %6s %10s %10s %9s %12s %16s %14s\n", "L", "flash ms", "naive ms", "speed-up",
              "flash GF/s", "flash +MiB", "naive +MiB");
  for (int i = 0; i < 4; ++i) {
    AttentionBenchConfig c{.heads = 8, .kv_heads = 2, .head_dim = 64, .seq = lengths[i],
                           .causal = true, .naive = true, .repeats = 2};
    const AttentionBenchResult r = run_attention_bench(c);
    std::printf("  %6lld %10.2f %10.2f %8.1fx %12.1f %16.1f %14.1f\n", (long long)lengths[i],
                r.fwd_ms, r.naive_ms, r.naive_ms / r.fwd_ms, r.fwd_gflops, flash_rss[i],
                double(r.naive_scratch_bytes) / kMiB);
  }
  std::printf("  flash +MiB: measured growth of the process's peak RSS during a forward, beyond q, k, v, out;\n"
              "  naive +MiB: the scores and repeated K/V it materialises (grows as L^2)\n");
}

void demo_decode(int threads, bool quick) {
  const int64_t context = quick ? 512 : 16384;
  std::printf("\n== 4. Decode: one token against a %lld-token f16 cache (H = 32, D = 128, one layer)\n",
              (long long)context);
  const double bw = measure_read_gbps(threads, quick ? int64_t(16) << 20 : int64_t(512) << 20);
  std::printf("  %5s %10s %10s %8s %12s\n", "Hkv", "ms/token", "cache MB", "GB/s", "of read bw");
  double prev_ms = 0;
  for (int64_t hkv : {32, 8, 1}) {
    DecodeBenchConfig c{.heads = 32, .kv_heads = hkv, .head_dim = 128, .context = context,
                        .cold = !quick};
    const DecodeBenchResult r = run_decode_bench(c);
    std::printf("  %5lld %10.3f %10.1f %8.1f %11.0f%%", (long long)hkv, r.ms_per_token,
                r.cache_bytes / 1e6, r.gbps, 100 * r.gbps / bw);
    if (prev_ms > 0) std::printf("   %.1fx faster than the row above", prev_ms / r.ms_per_token);
    std::printf("\n");
    prev_ms = r.ms_per_token;
  }
  std::printf("  measured read bandwidth in this run: %.1f GB/s\n", bw);
}

GptConfig demo_model_config() {
  GptConfig c;
  c.vocab_size = ByteTokenizer::vocab_size();
  c.hidden_size = 128;
  c.intermediate_size = 344;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;  // GQA: two query heads per KV head
  c.head_dim = 32;
  c.max_position_embeddings = 128;
  return c;
}

GptModel demo_train(const DemoCli& cli) {
  const GptConfig cfg = demo_model_config();
  section("5. Train a GQA GPT on Debian's fortunes");
  TextCorpus corpus(load_fortunes());
  TrainOptions o;
  o.steps = cli.train_steps;
  o.batch = 8;
  o.seq_len = cfg.max_position_embeddings;
  o.schedule = {.max_lr = 2e-3, .min_lr = 2e-4, .warmup_steps = std::min<int64_t>(100, std::max<int64_t>(1, o.steps / 10)), .total_steps = o.steps};
  o.eval_every = 0;
  o.eval_windows = 16;
  o.checkpoint_every = 0;
  o.out_dir = cli.out;
  std::printf("  %lld parameters: %lld layers, d_model %lld, %lld query heads sharing %lld KV heads,"
              " context %lld; %lld steps of %lld x %lld tokens -> %s\n",
              (long long)gpt_parameter_count(cfg), (long long)cfg.num_hidden_layers,
              (long long)cfg.hidden_size, (long long)cfg.num_attention_heads,
              (long long)cfg.num_key_value_heads, (long long)cfg.max_position_embeddings,
              (long long)o.steps, (long long)o.batch, (long long)o.seq_len, cli.out.c_str());
  std::fflush(stdout);
  GptModel model(cfg);
  model.init_random(o.seed);
  GptTrainer trainer(model, corpus, o);
  const double t0 = now_seconds();
  const TrainStepResult last = trainer.run();
  const double dt = now_seconds() - t0;
  const double val = trainer.evaluate(o.eval_windows);
  std::printf("  %.1f s, %.0f tokens/s; train loss %.3f, validation %.3f nats = %.2f bits per byte"
              " (a uniform guess over bytes is 8)\n",
              dt, double(o.steps * o.batch * o.seq_len) / dt, last.loss, val, val / std::log(2.0));
  return model;
}

void demo_stream(const GptModel& model, const DemoCli& cli) {
  const int64_t context = model.config().max_position_embeddings;
  section("6. Streaming generation with the StreamingLLM cache (4 sink tokens + 124 recent)");
  GenerateOptions o{.sink_tokens = 4, .window = context - 4, .temperature = 0.8f, .top_k = 40, .seed = 1};
  GptGenerator gen(model, o);
  const std::string prompt = "Q: ";
  std::span<const float> logits = gen.feed(ByteTokenizer::kEndOfText);
  for (int32_t t : ByteTokenizer::encode(prompt)) logits = gen.feed(t);
  std::printf("  %lld tokens, %lldx the training context; the first 300 bytes:\n  | %s",
              (long long)cli.stream_tokens, (long long)(cli.stream_tokens / context), prompt.c_str());
  const double t0 = now_seconds();
  int64_t shown = 0;
  double mib_at_context = 0;
  for (int64_t i = 0; i < cli.stream_tokens; ++i) {
    const int32_t next = gen.sample(logits);
    if (next < 256 && shown < 300) {
      ++shown;
      if (next == '\n')
        std::printf("\n  | ");
      else  // bytes only: a sampled byte need not complete a UTF-8 character
        std::putchar(next == '\t' || (next >= 32 && next < 127) ? next : '?');
    }
    logits = gen.feed(next);
    if (gen.position() == context) mib_at_context = double(gen.cache().nbytes()) / kMiB;
  }
  const double dt = now_seconds() - t0;
  std::printf("\n  %.0f tokens/s; cache %.3f MiB at the training context and %.3f MiB after %lld"
              " tokens (%lld held)\n",
              cli.stream_tokens / dt, mib_at_context, double(gen.cache().nbytes()) / kMiB,
              (long long)gen.position(), (long long)gen.cache().cached(0, 0));
}

void run_demo(const DemoCli& cli) {
  ThreadCountScope scope(cli.threads);
  const int threads = num_threads();
  check(cli.train_steps >= 1, "--train-steps: must be >= 1");
  check(cli.stream_tokens >= 1, "--stream-tokens: must be >= 1");
  const std::string held = run_files_in(cli.out);  // checked before any work
  check(held.empty(), "--out: ", cli.out, " already holds a training run (", held,
        "); give the demo another --out or remove that run");
  std::printf("attnkit demo: %d threads; every figure below is measured in this run\n", threads);
  const double t0 = now_seconds();
  demo_kv_plan();
  demo_attention(cli.quick);  // before the roofline: its 512 MiB buffer would hide peak-RSS growth
  if (!cli.quick) demo_roofline(threads);
  demo_decode(threads, cli.quick);
  std::fflush(stdout);
  const GptModel model = demo_train(cli);
  demo_stream(model, cli);
  std::printf("\ndemo finished in %.0f s\n", now_seconds() - t0);
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto cli = std::make_shared<DemoCli>();
  auto* d = app.add_subcommand("demo", "A few minutes of what attnkit does on this machine (all figures measured)");
  d->add_option("--out", cli->out, "Where the demo model is saved")->capture_default_str();
  d->add_option("--train-steps", cli->train_steps, "Training steps of the demo GPT")
      ->capture_default_str()->check(integer_in(1, 1000000));
  d->add_option("--stream-tokens", cli->stream_tokens, "Tokens generated with the sink cache")
      ->capture_default_str()->check(integer_in(1, 100000000));
  add_threads_flag(*d, cli->threads);
  d->add_flag("--quick", cli->quick, "Tiny sizes and no roofline: checks that the demo runs (figures not meaningful)");
  d->callback([cli] { run_demo(*cli); });
}

}  // namespace attnkit::cli
