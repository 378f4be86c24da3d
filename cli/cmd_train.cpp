// `attnkit train gpt` and `attnkit eval`: causal-LM training and evaluation on text files or the
// corpora Debian ships (fortunes, the King James Bible), with the byte-level tokenizer.
#include <cmath>
#include <cstdio>
#include <memory>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/io/idx.hpp"  // kFashionMnistDir
#include "attnkit/io/text_corpus.hpp"
#include "attnkit/models/model_registry.hpp"
#include "attnkit/train/gpt_run.hpp"
#include "attnkit/train/run_dir.hpp"
#include "cli_data.hpp"
#include "commands.hpp"
#include "run_flags.hpp"
#include "flags.hpp"
#if ATTNKIT_HAVE_MPI
#include "attnkit/dist/dp_train.hpp"
#include "attnkit/dist/tp_train.hpp"
#endif

namespace attnkit::cli {
namespace {

struct TrainCli {
  GptModelSource model;
  std::string out;
  std::vector<std::string> data{"fortunes"};
  TrainOptions opts;
  ScheduleFlags schedule{.lr = 1e-3, .min_lr = 1e-4, .warmup = 100};
  int64_t tokens = 0;  // > 0: steps = ceil(tokens / (batch · seq))
  bool resume = false, overwrite = false, quiet = false, dp = false;
  int64_t tp = 1;  // > 1: tensor parallel over that many MPI processes
  TrainCli() {  // the default run: about 16 minutes on 2 cores (docs/models.md)
    opts.steps = 2000;
    opts.batch = 8;
    opts.seq_len = 256;
  }
};

RunStart run_start(const TrainCli& cli) { return cli::run_start(cli.resume, cli.overwrite); }

// Data parallelism under mpirun (--dp, dist/dp_train.hpp): MPI for the run's lifetime. Without
// --dp: nothing.
struct DataParallel {
#if ATTNKIT_HAVE_MPI
  std::unique_ptr<dist::MpiWorld> world;
#endif
  explicit DataParallel(bool on) {
    if (!on) return;
#if ATTNKIT_HAVE_MPI
    world = std::make_unique<dist::MpiWorld>();
#else
    fail("--dp: this attnkit was built without MPI (ATTNKIT_MPI=OFF or Open MPI not found)");
#endif
  }
#if ATTNKIT_HAVE_MPI
  void configure(TrainOptions& o) const {
    if (world) dist::configure_data_parallel(*world, o);
  }
  void check_in_sync(std::span<const float> params) const {
    if (world) dist::check_replicas_in_sync(*world, params);
  }
  // An error on one rank: end every rank (others may wait in an all-reduce forever otherwise).
  void abort_if_parallel(const std::exception& e) const {
    if (world) world->abort_all_if_parallel(e.what());
  }
  bool writer() const { return !world || world->rank() == 0; }
#else
  void configure(TrainOptions&) const {}
  void check_in_sync(std::span<const float>) const {}
  void abort_if_parallel(const std::exception&) const {}
  bool writer() const { return true; }
#endif
};

void run_train_ranks(const TrainCli& cli, const DataParallel& dp);
void run_train_tp(const TrainCli& cli);

void run_train(const TrainCli& cli) {
  check(cli.tp >= 1, "--tp: must be >= 1");
  check(cli.tp == 1 || !cli.dp, "--tp and --dp together are not supported: use one of them");
  if (cli.tp > 1) return run_train_tp(cli);
  const DataParallel dp(cli.dp);
  try {
    run_train_ranks(cli, dp);
  } catch (const std::exception& e) {
    dp.abort_if_parallel(e);
    throw;
  }
}

// The trainer's options from the command line (any rank, any parallelism), every flag checked.
TrainOptions train_options(const TrainCli& cli, const GptConfig& cfg) {
  TrainOptions o = checked_gpt_train_options(cli.opts, cli.schedule, cli.tokens, cfg);
  o.out_dir = cli.out;
  o.start = run_start(cli);
  return o;
}

void print_start(const GptConfig& cfg, const TextCorpus& corpus, int64_t start, int64_t steps, const char* how) {
  std::fprintf(stderr, "training %lld parameters on %zu train tokens, steps %lld..%lld, %d threads%s\n",
               (long long)gpt_parameter_count(cfg), corpus.tokens(Split::train).size(), (long long)start,
               (long long)steps, num_threads(), how);
}

void print_summary(const TrainStepResult& last, double val, const std::string& out) {
  std::printf("step %lld: train loss %.4f, validation loss %.4f (%.3f bits per byte); saved to %s\n",
              (long long)(last.step + 1), last.loss, val, val / std::log(2.0), out.c_str());
}

// The training run on this rank (all of it without --dp).
void run_train_ranks(const TrainCli& cli, const DataParallel& dp) {
  const RunDir run(cli.out, run_start(cli), "gpt", dp.writer());  // refusals before any work
  GptModel model = initial_gpt_model(cli.model, cli.opts.seed, run);
  const GptConfig cfg = model.config();
  TrainOptions o = train_options(cli, cfg);
  ThreadCountScope threads(cli.schedule.threads);
  TextCorpus corpus(load_documents(cli.data));
  o.progress = !cli.quiet && dp.writer();
  dp.configure(o);
  GptTrainer trainer(model, corpus, o);
  const int64_t start = cli.resume ? trainer.resume() : 0;
  if (nothing_to_train(o.out_dir, start, o.steps, dp.writer())) return;
  if (o.progress) print_start(cfg, corpus, start, o.steps, "");
  const TrainStepResult last = trainer.run();
  dp.check_in_sync(model.parameters());
  if (!dp.writer()) return;
  print_summary(last, trainer.evaluate(o.eval_windows), o.out_dir);
}

#if ATTNKIT_HAVE_MPI
void run_train_tp_ranks(const TrainCli& cli, const dist::MpiWorld& world);

void run_train_tp(const TrainCli& cli) {
  dist::MpiWorld world;
  try {
    run_train_tp_ranks(cli, world);
  } catch (const std::exception& e) {
    world.abort_all_if_parallel(e.what());  // the other ranks may wait in a collective
    throw;
  }
}

// Tensor-parallel training on this rank (--tp P): every rank builds the same whole model (same
// seed or --init), keeps its shard and runs every step's whole batch; rank 0 logs and writes
// whole-model checkpoints (gathered; a gather also checks that replicas agree bitwise).
void run_train_tp_ranks(const TrainCli& cli, const dist::MpiWorld& world) {
  check(world.size() == cli.tp, "--tp: ", cli.tp, " processes requested but MPI started ", world.size(),
        " (launch with mpirun -np ", cli.tp, ")");
  const RunDir run(cli.out, run_start(cli), "gpt", world.rank() == 0);  // refusals before any work
  std::unique_ptr<dist::TpTraining> tp;
  GptConfig cfg;
  {  // the whole model lives only until its shard is cut
    const GptModel full = initial_gpt_model(cli.model, cli.opts.seed, run);
    cfg = full.config();
    tp = std::make_unique<dist::TpTraining>(full, world.rank(), world.size());
  }
  TrainOptions o = train_options(cli, cfg);
  ThreadCountScope threads(cli.schedule.threads);
  TextCorpus corpus(load_documents(cli.data));
  o.progress = !cli.quiet && world.rank() == 0;
  tp->configure(o);
  GptTrainer trainer(tp->shard(), corpus, o);
  const int64_t start = cli.resume ? trainer.resume() : 0;
  if (nothing_to_train(o.out_dir, start, o.steps, world.rank() == 0)) return;
  if (o.progress)
    print_start(cfg, corpus, start, o.steps,
                (", tensor parallel over " + std::to_string(world.size()) + " processes").c_str());
  const TrainStepResult last = trainer.run();  // its last checkpoint gathered and checked the replicas
  const double val = trainer.evaluate(o.eval_windows);  // collective: every rank runs its shard
  if (world.rank() == 0) print_summary(last, val, o.out_dir);
}
#else
void run_train_tp(const TrainCli&) {
  fail("--tp: this attnkit was built without MPI (ATTNKIT_MPI=OFF or Open MPI not found)");
}
#endif

}  // namespace

void add_train_command(CLI::App& app) {
  auto* train = app.add_subcommand("train", "Train models");
  train->require_subcommand(1);
  auto cli = std::make_shared<TrainCli>();
  auto* gpt = train->add_subcommand("gpt", "Causal-LM training of a GPT (Llama architecture) on byte-level text");
  auto* config = gpt->add_option("--config", cli->model.config_file, "config.json (Hugging Face Llama keys) instead of --preset");
  auto* preset = gpt->add_option("--preset", cli->model.preset, "Model shape: tiny, small")->capture_default_str();
  gpt->add_option("--init", cli->model.init,
                  "Continue from this model directory (e.g. a convert-gqa output): its config and weights, "
                  "a fresh optimizer")
      ->excludes(config)
      ->excludes(preset);
  auto* tokens = gpt->add_option("--tokens", cli->tokens, "Training tokens; sets --steps to ceil(tokens / (batch * seq))");
  gpt->add_option("--data", cli->data, "Text files, or 'fortunes' / 'bible' (Debian's corpora)")->capture_default_str();
  gpt->add_option("--out", cli->out, "Run directory (model, checkpoints, log.csv; see docs/reliability.md)")->required();
  gpt->add_option("--steps", cli->opts.steps, "Optimizer steps")->capture_default_str()->excludes(tokens);
  gpt->add_option("--batch", cli->opts.batch, "Windows per step")->capture_default_str();
  gpt->add_option("--seq", cli->opts.seq_len, "Tokens per window")->capture_default_str();
  gpt->add_option("--lr", cli->schedule.lr, "Peak learning rate")->capture_default_str();
  gpt->add_option("--min-lr", cli->schedule.min_lr, "Final learning rate of the cosine decay")->capture_default_str();
  gpt->add_option("--warmup", cli->schedule.warmup, "Linear warmup steps")->capture_default_str();
  gpt->add_option("--weight-decay", cli->opts.adamw.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  gpt->add_option("--clip", cli->opts.clip, "Global gradient-norm bound (0 = off)")->capture_default_str();
  gpt->add_option("--eval-every", cli->opts.eval_every, "Steps between validation evaluations")->capture_default_str();
  gpt->add_option("--checkpoint-every", cli->opts.checkpoint_every, "Steps between checkpoints")->capture_default_str();
  add_seed_flag(*gpt, cli->opts.seed, "Seed of initialisation and data windows");
  auto* resume = gpt->add_flag("--resume", cli->resume,
                               "Continue the run in --out from its committed checkpoint (its own config: no "
                               "--preset/--config needed)");
  gpt->add_flag("--overwrite", cli->overwrite, "Replace the run that --out holds (without it, such an --out is refused)")
      ->excludes(resume);
  gpt->add_flag("--dp", cli->dp,
                "Data parallel under `mpirun -np P`: each process takes batch/P windows of every step; "
                "gradients are averaged (all-reduce); rank 0 writes");
  gpt->add_option("--tp", cli->tp,
                  "Tensor parallel under `mpirun -np P` (P = --tp): each process holds H/P heads and F/P of "
                  "the MLP (Megatron split) and runs the whole batch; rank 0 writes an ordinary one-process "
                  "checkpoint (gathered). 1 = off; not with --dp")
      ->capture_default_str();
  add_threads_flag(*gpt, cli->schedule.threads);
  gpt->add_flag("--quiet", cli->quiet, "No progress output");
  gpt->callback([cli, gpt] {
    cli->model.shape_given = gpt->count("--preset") + gpt->count("--config") > 0;
    cli->schedule.warmup_given = gpt->count("--warmup") > 0;
    run_train(*cli);
  });

  auto model = std::make_shared<std::string>();
  auto data = std::make_shared<std::vector<std::string>>(std::vector<std::string>{"fortunes"});
  auto windows = std::make_shared<int64_t>(64);
  auto split = std::make_shared<std::string>("validation");
  auto* ev = app.add_subcommand("eval", "Loss, perplexity and bits per byte of a GPT on text; masked-LM loss or task accuracy of a BERT; test accuracy of an image model");
  ev->add_option("--model", *model, "Model directory (config.json + model.safetensors)")->required();
  ev->add_option("--data", *data, "Text files, or 'fortunes' / 'bible'")->capture_default_str();
  ev->add_option("--windows", *windows, "Context-length windows to evaluate, at most (BERT: validation examples; image models: test images, default all)")
      ->capture_default_str()->check(integer_in(1));
  ev->add_option("--split", *split, "validation, train, or all (files given as --data: use all)")->capture_default_str();
  auto data_dir = std::make_shared<std::string>(kFashionMnistDir);
  ev->add_option("--data-dir", *data_dir, "Image models: MNIST-style IDX directory (its test split is scored)")
      ->capture_default_str();
  auto windows_set = std::make_shared<bool>(false);
  ev->callback([model, data, windows, split, data_dir, windows_set, ev] {
    *windows_set = ev->count("--windows") > 0;
    const ModelKind kind = model_type_of_dir(*model).kind;  // models/model_registry.hpp
    if (kind == ModelKind::kBert) return run_bert_eval(*model, *data, *windows);  // masked LM / task
    if (kind == ModelKind::kImage) return run_image_eval(*model, *data_dir, *windows_set ? *windows : 0);
    GptModel m = GptModel::load(*model);
    const std::vector<int32_t> tokens = load_split_tokens(*data, *split);
    const int64_t seq = m.config().max_position_embeddings;
    const int64_t needed = seq - m.config().registers + 1;  // one window of text and its next token
    check(int64_t(tokens.size()) >= needed, "--data: the ", *split, " split has ", tokens.size(),
          " tokens; eval needs at least ", needed, " (the model's context + 1)");
    const double loss = evaluate_loss(m, tokens, seq, *windows);
    std::printf("loss %.4f  perplexity %.3f  bits per byte %.4f  (%s split, windows of %lld tokens)\n",
                loss, std::exp(loss), loss / std::log(2.0), split->c_str(), (long long)seq);
  });
}

}  // namespace attnkit::cli
