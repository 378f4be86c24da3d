// `attnkit train bert`, `attnkit finetune bert` and BERT directories in `attnkit eval`: masked-LM
// (+ NSP) pretraining with pad / bucket / pack batching, fine-tuning on the fortunes tasks of
// train/bert_tasks.hpp (file classification, attribution tagging and span), and their evaluation.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/io/text_corpus.hpp"
#include "attnkit/models/model_registry.hpp"
#include "attnkit/train/bert_run.hpp"
#include "attnkit/train/run_dir.hpp"
#include "cli_data.hpp"
#include "commands.hpp"
#include "run_flags.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

// Task metrics: one line, or a JSON object with json.
void print_task_metrics(const std::string& task, const BertEvalResult& r, const BertTaskData& data,
                        bool json = false) {
  if (json) {
    nlohmann::ordered_json j{{"model_type", "bert"}, {"task", task}, {"accuracy", r.accuracy}, {"loss", r.loss},
                             {"examples", r.count}};
    if (task != "attribution-span") j["majority_baseline"] = majority_baseline(data);
    if (task == "attribution-tokens") j["f1"] = r.f1;
    std::cout << j.dump(2) << "\n";
    return;
  }
  if (task == "attribution-span") {
    std::printf("%s: exact match %.4f, loss %.4f over %lld validation entries\n", task.c_str(), r.accuracy,
                r.loss, (long long)r.count);
    return;
  }
  std::printf("%s: accuracy %.4f (majority baseline %.4f)", task.c_str(), r.accuracy, majority_baseline(data));
  if (task == "attribution-tokens") std::printf(", name F1 %.4f", r.f1);
  std::printf(", loss %.4f over %lld validation entries\n", r.loss, (long long)r.count);
}

struct BertCli {
  BertModelSource model;
  std::string out, objective = "mlm", batching = "pack", init, task = "fortune-file";
  std::vector<std::string> data{"fortunes"};
  std::vector<std::string> classes{"computers", "definitions", "people", "songs-poems"};
  BertTrainOptions opts;
  ScheduleFlags schedule{.lr = 1e-3, .min_lr = 1e-4, .warmup = 30};
  bool resume = false, overwrite = false, quiet = false;
  BertCli() {
    opts.steps = 300;
    opts.batch = 16;
    opts.max_len = 128;
  }
};

void add_common_options(CLI::App* cmd, BertCli& cli) {
  cmd->add_option("--out", cli.out, "Run directory (model, checkpoints, log.csv; see docs/reliability.md)")->required();
  cmd->add_option("--batching", cli.batching, "pad, bucket or pack")->capture_default_str();
  cmd->add_option("--steps", cli.opts.steps, "Optimizer steps")->capture_default_str();
  cmd->add_option("--batch", cli.opts.batch, "Examples per step")->capture_default_str();
  cmd->add_option("--seq", cli.opts.max_len, "Tokens per example, at most (and per packed row)")->capture_default_str();
  cmd->add_option("--lr", cli.schedule.lr, "Peak learning rate")->capture_default_str();
  cmd->add_option("--min-lr", cli.schedule.min_lr, "Final learning rate of the cosine decay")->capture_default_str();
  cmd->add_option("--warmup", cli.schedule.warmup, "Linear warmup steps")->capture_default_str();
  cmd->add_option("--weight-decay", cli.opts.adamw.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  cmd->add_option("--clip", cli.opts.clip, "Global gradient-norm bound (0 = off)")->capture_default_str();
  cmd->add_option("--dropout", cli.model.dropout, "Hidden and attention dropout probability")->capture_default_str();
  cmd->add_option("--eval-every", cli.opts.eval_every, "Steps between validation evaluations")->capture_default_str();
  cmd->add_option("--eval-examples", cli.opts.eval_examples, "Validation examples per evaluation")->capture_default_str();
  cmd->add_option("--checkpoint-every", cli.opts.checkpoint_every, "Steps between checkpoints")->capture_default_str();
  add_seed_flag(*cmd, cli.opts.seed, "Seed of initialisation, examples, masking and dropout");
  auto* resume = cmd->add_flag("--resume", cli.resume,
                               "Continue the run in --out from its committed checkpoint (its own config)");
  cmd->add_flag("--overwrite", cli.overwrite, "Replace the run that --out holds (without it, such an --out is refused)")
      ->excludes(resume);
  add_threads_flag(*cmd, cli.schedule.threads);
  add_precision_flag(*cmd, cli.opts.precision);
  cmd->add_flag("--quiet", cli.quiet, "No progress output");
}

RunStart run_start(const BertCli& cli) { return cli::run_start(cli.resume, cli.overwrite); }

// The trainer's options from the command line, every flag checked (before any data is loaded).
BertTrainOptions train_options(const BertCli& cli) {
  BertTrainOptions o = checked_bert_train_options(cli.opts, cli.schedule, cli.model.dropout);
  o.out_dir = cli.out;
  o.start = run_start(cli);
  o.progress = !cli.quiet;
  o.batching = parse_batching(cli.batching);
  return o;
}

void print_result(const BertStepResult& last, const BertEvalResult& val, const BertTrainOptions& o) {
  const bool task = o.objective != BertObjective::kMlm && o.objective != BertObjective::kMlmNsp;
  std::printf("step %lld: train loss %.4f, validation loss %.4f", (long long)(last.step + 1), last.loss, val.loss);
  if (val.accuracy > 0) std::printf(", validation accuracy %.4f", val.accuracy);
  std::printf(" (%lld %s); saved to %s\n", (long long)val.count, task ? "examples" : "masked positions",
              o.out_dir.c_str());
}

void run_pretrain(const BertCli& cli) {
  const RunDir run(cli.out, run_start(cli), "bert");  // refusals before any work
  BertTrainOptions o = train_options(cli);
  o.objective = parse_bert_objective(cli.objective);
  const BertConfig cfg = pretraining_bert_config(cli.model, o.objective, run);
  ThreadCountScope threads(cli.schedule.threads);
  BertDocuments docs = split_documents(load_documents(cli.data), {});
  const size_t n_docs = docs.train.size();
  BertModel model(cfg);
  model.init_random(o.seed);
  BertTrainer trainer(model, std::move(docs), o);
  const int64_t start = cli.resume ? trainer.resume() : 0;
  if (nothing_to_train(o.out_dir, start, o.steps)) return;
  if (!cli.quiet)
    std::fprintf(stderr, "training BERT (%s, %s batching) with %lld parameters on %zu documents, steps %lld..%lld, %d threads\n",
                 cli.objective.c_str(), cli.batching.c_str(), (long long)bert_parameter_count(cfg),
                 n_docs, (long long)start, (long long)o.steps, num_threads());
  const BertStepResult last = trainer.run();
  print_result(last, trainer.evaluate(o.eval_examples), o);
}

void run_finetune(const BertCli& cli) {
  const RunDir run(cli.out, run_start(cli), "bert");  // refusals before any work
  BertTrainOptions o = train_options(cli);
  ThreadCountScope threads(cli.schedule.threads);
  check(!cli.init.empty(), "--init: a pretrained BERT directory is required");
  run.check_input_outside(cli.init, "--init");
  require_model_kind(cli.init, ModelKind::kBert, "finetune bert --init");
  BertTask task = make_bert_task(cli.task, cli.classes, o.max_len);  // checks --classes first
  const BertModel pre = BertModel::load(cli.init);
  o.objective = task.objective;
  BertModel model(finetuning_bert_config(pre.config(), task, cli.model.dropout, run));
  model.init_random(o.seed);  // the new heads (and the pooler if --init has none)
  const int64_t copied = model.copy_matching(pre);
  const size_t n_train = task.data.train.size(), n_val = task.data.validation.size();
  const BertTaskData data = task.data;  // kept for the baseline
  BertTrainer trainer(model, std::move(task.data), o);
  const int64_t start = cli.resume ? trainer.resume() : 0;
  if (nothing_to_train(o.out_dir, start, o.steps)) return;
  if (!cli.quiet)
    std::fprintf(stderr, "fine-tuning %s on %zu train / %zu validation examples; %lld tensors from %s; steps %lld..%lld\n",
                 cli.task.c_str(), n_train, n_val, (long long)copied, cli.init.c_str(), (long long)start,
                 (long long)o.steps);
  const BertStepResult last = trainer.run();
  const BertEvalResult val = trainer.evaluate(int64_t(n_val));
  print_result(last, val, o);
  print_task_metrics(cli.task, val, data);
}

}  // namespace

void run_bert_eval(const std::string& dir, const std::vector<std::string>& data, int64_t examples, bool json) {
  BertModel model = BertModel::load(dir);
  const BertConfig& cfg = model.config();
  BertTrainOptions o;
  o.out_dir = dir;
  o.batch = 16;
  o.max_len = cfg.max_position_embeddings;
  o.eval_examples = examples;
  if (!cfg.has_mlm()) {
    const std::string name = bert_task_name(cfg);
    check(name != "fortune-file" || int64_t(cfg.labels.size()) == cfg.num_labels, "eval: ", dir,
          "/config.json has no id2label (the fortunes files of the fortune-file task)");
    BertTask task = make_bert_task(name, cfg.labels, o.max_len);
    o.objective = task.objective;
    const BertTaskData data = task.data;
    BertTrainer t(model, std::move(task.data), o);
    print_task_metrics(name, t.evaluate(int64_t(data.validation.size())), data, json);
    return;
  }
  check(cfg.has_mlm(), "eval: ", bert_architecture_name(cfg.architecture), " is not supported by eval");
  o.objective = cfg.architecture == BertArchitecture::kPreTraining ? BertObjective::kMlmNsp : BertObjective::kMlm;
  BertTrainer t(model, split_documents(load_documents(data), {}), o);
  const BertEvalResult r = t.evaluate(examples);
  if (json) {
    nlohmann::ordered_json j{{"model_type", "bert"},
                             {"objective", o.objective == BertObjective::kMlmNsp ? "mlm+nsp" : "mlm"},
                             {"loss", r.loss},
                             {"bits_per_masked_byte", r.loss / std::log(2.0)},
                             {"masked_positions", r.count},
                             {"masked_fraction", r.loss_fraction}};
    if (o.objective == BertObjective::kMlmNsp) j["nsp_accuracy"] = r.accuracy;
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::printf("masked-LM loss %.4f (%.4f bits per masked byte) over %lld masked positions (%.1f %% of real tokens)",
              r.loss, r.loss / std::log(2.0), (long long)r.count, 100 * r.loss_fraction);
  if (o.objective == BertObjective::kMlmNsp) std::printf(", NSP accuracy %.4f", r.accuracy);
  std::printf("\n");
}

void add_bert_commands(CLI::App& app) {
  auto cli = std::make_shared<BertCli>();
  CLI::App* train = app.get_subcommand("train");
  auto* bert = train->add_subcommand("bert", "Masked-LM (+ NSP) pretraining of a BERT encoder on byte-level text");
  bert->add_option("--objective", cli->objective, "mlm or mlm+nsp")->capture_default_str();
  auto* config = bert->add_option("--config", cli->model.config_file,
                                  "config.json (Hugging Face BertConfig keys) instead of --preset");
  bert->add_option("--preset", cli->model.preset, "Model shape: tiny, mini, small")->capture_default_str()->excludes(config);
  bert->add_option("--data", cli->data, "Text files, or 'fortunes' / 'bible' (Debian's corpora)")->capture_default_str();
  add_common_options(bert, *cli);
  bert->callback([cli, bert] {
    cli->model.shape_given = bert->count("--preset") + bert->count("--config") > 0;
    cli->schedule.warmup_given = bert->count("--warmup") > 0;
    run_pretrain(*cli);
  });

  auto ft_cli = std::make_shared<BertCli>();
  ft_cli->opts.steps = 200;
  ft_cli->schedule = {.lr = 3e-4, .min_lr = 3e-5, .warmup = 20};
  auto* ft = app.add_subcommand("finetune", "Fine-tune models on a task");
  ft->require_subcommand(1);
  auto* ftb = ft->add_subcommand("bert", "Fine-tune a pretrained BERT on a fortunes task");
  ftb->add_option("--task", ft_cli->task,
                  "fortune-file (which fortunes file an entry comes from), attribution-tokens (tag the "
                  "bytes of an entry's '-- name' attribution), attribution-span (its start/end)")
      ->capture_default_str();
  ftb->add_option("--init", ft_cli->init, "Pretrained BERT directory (encoder and pooler are copied)")->required();
  ftb->add_option("--classes", ft_cli->classes, "fortune-file: the fortunes files that are the classes")->capture_default_str();
  add_common_options(ftb, *ft_cli);
  ftb->callback([ft_cli, ftb] {
    ft_cli->schedule.warmup_given = ftb->count("--warmup") > 0;
    run_finetune(*ft_cli);
  });
}

}  // namespace attnkit::cli
