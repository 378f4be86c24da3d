// `attnkit train gpt` and `attnkit eval`: causal-LM training and evaluation on text files or the
// corpora Debian ships (fortunes, the King James Bible), with the byte-level tokenizer.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

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
  bool seq_given = false;  // without --seq: the model's context, at most kDefaultSeq
  int64_t tp = 1;  // > 1: tensor parallel over that many MPI processes
  TrainCli() {  // the default run: about 16 minutes on 2 cores (docs/models.md)
    opts.steps = 2000;
    opts.batch = 8;
  }
  static constexpr int64_t kDefaultSeq = 256;
};

RunStart run_start(const TrainCli& cli) { return cli::run_start(cli.resume, cli.overwrite); }

// --dp or --tp P under mpirun (dist/dp_train.hpp, dist/tp_train.hpp): MPI for the run's lifetime,
// this rank's model (--tp: its shard) and the trainer's hooks; rank 0 writes. Neither: one process.
class Parallel {
 public:
  explicit Parallel(const TrainCli& cli) {
    check(cli.tp >= 1, "--tp: must be >= 1");
    check(cli.tp == 1 || !cli.dp, "--tp and --dp together are not supported: use one of them");
    if (!cli.dp && cli.tp == 1) return;
#if ATTNKIT_HAVE_MPI
    world_ = std::make_unique<dist::MpiWorld>();
    tp_ = cli.tp > 1;
#else
    fail(cli.dp ? "--dp" : "--tp", ": this attnkit was built without MPI (ATTNKIT_MPI=OFF or Open MPI not found)");
#endif
  }
  bool writer() const { return rank() == 0; }
  int processes() const {
#if ATTNKIT_HAVE_MPI
    if (world_) return world_->size();
#endif
    return 1;
  }
  // The model this rank trains: `whole`, or with --tp this rank's shard of it (every rank built the
  // same whole model; it is freed once cut).
  GptModel& adopt(GptModel whole) {
#if ATTNKIT_HAVE_MPI
    if (tp_) return (tp_training_ = std::make_unique<dist::TpTraining>(whole, rank(), world_->size()))->shard();
#endif
    return model_.emplace(std::move(whole));
  }
  void configure(TrainOptions& o) const {
#if ATTNKIT_HAVE_MPI
    if (tp_training_) tp_training_->configure(o);
    else if (world_) dist::configure_data_parallel(*world_, o);
#endif
  }
  // After training: --dp checks that every rank holds the same parameters (--tp: the last
  // checkpoint's gather did).
  void check_in_sync(std::span<const float> params) const {
#if ATTNKIT_HAVE_MPI
    if (world_ && !tp_) dist::check_replicas_in_sync(*world_, params);
#endif
  }
  // An error on one rank: end every rank (others may wait in a collective forever otherwise).
  void abort_if_parallel(const std::exception& e) const {
#if ATTNKIT_HAVE_MPI
    if (world_) world_->abort_all_if_parallel(e.what());
#endif
  }
  std::string description() const {
#if ATTNKIT_HAVE_MPI
    if (tp_) return ", tensor parallel over " + std::to_string(world_->size()) + " processes";
#endif
    return "";
  }

 private:
  int rank() const {
#if ATTNKIT_HAVE_MPI
    if (world_) return world_->rank();
#endif
    return 0;
  }
#if ATTNKIT_HAVE_MPI
  std::unique_ptr<dist::MpiWorld> world_;
  std::unique_ptr<dist::TpTraining> tp_training_;
  bool tp_ = false;
#endif
  std::optional<GptModel> model_;
};

// The trainer's options from the command line (any rank, any parallelism), every flag checked.
TrainOptions train_options(const TrainCli& cli, const GptConfig& cfg) {
  TrainOptions flags = cli.opts;
  if (!cli.seq_given) flags.seq_len = std::min(TrainCli::kDefaultSeq, cfg.max_position_embeddings);
  TrainOptions o = checked_gpt_train_options(flags, cli.schedule, cli.tokens, cfg);
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

// The training run on this rank (all of it without --dp / --tp).
void run_train_rank(const TrainCli& cli, Parallel& par) {
  check(cli.tp == 1 || par.processes() == cli.tp, "--tp: ", cli.tp, " processes requested but MPI started ",
        par.processes(), " (launch with mpirun -np ", cli.tp, ")");
  const RunDir run(cli.out, run_start(cli), "gpt", par.writer());  // refusals before any work
  GptModel& model = par.adopt(initial_gpt_model(cli.model, cli.opts.seed, run));
  const GptConfig cfg = model.config();
  TrainOptions o = train_options(cli, cfg);
  ThreadCountScope threads(cli.schedule.threads);
  TextCorpus corpus(load_documents(cli.data));
  o.progress = !cli.quiet && par.writer();
  par.configure(o);
  GptTrainer trainer(model, corpus, o);
  const int64_t start = cli.resume ? trainer.resume() : 0;
  if (nothing_to_train(o.out_dir, start, o.steps, par.writer())) return;
  if (o.progress) print_start(cfg, corpus, start, o.steps, par.description().c_str());
  const TrainStepResult last = trainer.run();
  par.check_in_sync(model.parameters());
  const double val = trainer.evaluate(o.eval_windows);  // --tp: collective, every rank runs its shard
  if (par.writer()) print_summary(last, val, o.out_dir);
}

void run_train(const TrainCli& cli) {
  Parallel par(cli);
  try {
    run_train_rank(cli, par);
  } catch (const std::exception& e) {
    par.abort_if_parallel(e);
    throw;
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* train = app.add_subcommand("train", "Train models");
  train->require_subcommand(1);
  auto cli = std::make_shared<TrainCli>();
  auto* gpt = train->add_subcommand("gpt", "Causal-LM training of a GPT (Llama architecture) on byte-level text");
  auto* config = gpt->add_option("--config", cli->model.config_file, "config.json (Hugging Face Llama keys) instead of --preset");
  auto* preset = gpt->add_option("--preset", cli->model.preset, "Model shape: tiny, small")->capture_default_str();
  config->excludes(preset);
  gpt->add_option("--init", cli->model.init,
                  "Continue from this model directory (e.g. a convert-gqa output): its config and weights, "
                  "a fresh optimizer")
      ->excludes(config)
      ->excludes(preset);
  auto* tokens = gpt->add_option("--tokens", cli->tokens, "Training tokens; sets --steps to ceil(tokens / (batch * seq))")
                     ->check(CLI::Range(int64_t(1), int64_t(1) << 50));
  gpt->add_option("--data", cli->data, "Text files, or 'fortunes' / 'bible' (Debian's corpora)")->capture_default_str();
  gpt->add_option("--out", cli->out, "Run directory (model, checkpoints, log.csv; see docs/reliability.md)")->required();
  gpt->add_option("--steps", cli->opts.steps, "Optimizer steps")->capture_default_str()->excludes(tokens);
  gpt->add_option("--batch", cli->opts.batch, "Windows per step")->capture_default_str();
  gpt->add_option("--seq", cli->opts.seq_len,
                  "Tokens per window (default: the model's context max_position_embeddings, at most 256)");
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
  add_precision_flag(*gpt, cli->opts.precision);
  add_threads_flag(*gpt, cli->schedule.threads);
  gpt->add_flag("--quiet", cli->quiet, "No progress output");
  gpt->callback([cli, gpt] {
    cli->model.shape_given = gpt->count("--preset") + gpt->count("--config") > 0;
    cli->schedule.warmup_given = gpt->count("--warmup") > 0;
    cli->seq_given = gpt->count("--seq") > 0;
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
  auto json = std::make_shared<bool>(false);
  add_json_flag(*ev, *json, "Print the results as one JSON object");
  ev->callback([model, data, windows, split, data_dir, windows_set, json, ev] {
    *windows_set = ev->count("--windows") > 0;
    const ModelKind kind = model_type_of_dir(*model).kind;  // models/model_registry.hpp
    if (kind == ModelKind::kBert) return run_bert_eval(*model, *data, *windows, *json);  // masked LM / task
    if (kind == ModelKind::kImage) return run_image_eval(*model, *data_dir, *windows_set ? *windows : 0, *json);
    GptModel m = GptModel::load(*model);
    const std::vector<int32_t> tokens = load_split_tokens(*data, *split);
    const int64_t seq = m.config().max_position_embeddings;
    const int64_t needed = seq - m.config().registers + 1;  // one window of text and its next token
    check(int64_t(tokens.size()) >= needed, "--data: the ", *split, " split has ", tokens.size(),
          " tokens; eval needs at least ", needed, " (the model's context + 1)");
    const double loss = evaluate_loss(m, tokens, seq, *windows);
    if (*json) {
      const nlohmann::ordered_json j{{"model_type", "llama"}, {"loss", loss}, {"perplexity", std::exp(loss)},
                                     {"bits_per_byte", loss / std::log(2.0)}, {"split", *split},
                                     {"window_tokens", seq}};
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::printf("loss %.4f  perplexity %.3f  bits per byte %.4f  (%s split, windows of %lld tokens)\n",
                loss, std::exp(loss), loss / std::log(2.0), split->c_str(), (long long)seq);
  });
}

}  // namespace attnkit::cli
