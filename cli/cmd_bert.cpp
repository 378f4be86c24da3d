// `attnkit train bert`, `attnkit finetune bert` and BERT directories in `attnkit eval`: masked-LM
// (+ NSP) pretraining with pad / bucket / pack batching, fine-tuning on the fortunes tasks of
// train/bert_tasks.hpp (file classification, attribution tagging and span), and their evaluation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/io/text_corpus.hpp"
#include "attnkit/io/tokenizer.hpp"
#include "attnkit/models/model_registry.hpp"
#include "attnkit/train/bert_trainer.hpp"
#include "attnkit/train/presets.hpp"
#include "attnkit/train/run_dir.hpp"
#include "attnkit/train/train_checks.hpp"
#include "cli_data.hpp"
#include "commands.hpp"
#include "run_flags.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

// A fine-tuning task's examples and the architecture and objective that fit it.
struct Task {
  BertTaskData data;
  BertArchitecture architecture;
  BertObjective objective;
};

Task make_task(const std::string& name, const std::vector<std::string>& classes, int64_t max_len) {
  if (name == "fortune-file")
    return {fortune_file_task(classes, max_len, kFortunesDir), BertArchitecture::kSequenceClassification,
            BertObjective::kClassify};
  if (name == "attribution-tokens")
    return {attribution_task(load_fortunes(), false, max_len), BertArchitecture::kTokenClassification,
            BertObjective::kTokens};
  if (name == "attribution-span")
    return {attribution_task(load_fortunes(), true, max_len), BertArchitecture::kQuestionAnswering,
            BertObjective::kSpan};
  fail("--task: expected fortune-file, attribution-tokens or attribution-span, got '", name, "'");
}

// One line of task metrics.
void print_task_metrics(const std::string& task, const BertEvalResult& r, const BertTaskData& data) {
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
  std::string config_file, preset = "mini", out, objective = "mlm", batching = "pack", init, task = "fortune-file";
  std::vector<std::string> data{"fortunes"};
  std::vector<std::string> classes{"computers", "definitions", "people", "songs-poems"};
  BertTrainOptions opts;
  double lr = 1e-3, min_lr = 1e-4, dropout = 0.1;
  int64_t warmup = 30;
  bool resume = false, overwrite = false, quiet = false;
  bool preset_given = false, config_given = false, warmup_given = false;  // set on the command line
  int threads = 0;
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
  cmd->add_option("--lr", cli.lr, "Peak learning rate")->capture_default_str();
  cmd->add_option("--min-lr", cli.min_lr, "Final learning rate of the cosine decay")->capture_default_str();
  cmd->add_option("--warmup", cli.warmup, "Linear warmup steps")->capture_default_str();
  cmd->add_option("--weight-decay", cli.opts.adamw.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  cmd->add_option("--clip", cli.opts.clip, "Global gradient-norm bound (0 = off)")->capture_default_str();
  cmd->add_option("--dropout", cli.dropout, "Hidden and attention dropout probability")->capture_default_str();
  cmd->add_option("--eval-every", cli.opts.eval_every, "Steps between validation evaluations")->capture_default_str();
  cmd->add_option("--eval-examples", cli.opts.eval_examples, "Validation examples per evaluation")->capture_default_str();
  cmd->add_option("--checkpoint-every", cli.opts.checkpoint_every, "Steps between checkpoints")->capture_default_str();
  add_seed_flag(*cmd, cli.opts.seed, "Seed of initialisation, examples, masking and dropout");
  auto* resume = cmd->add_flag("--resume", cli.resume,
                               "Continue the run in --out from its committed checkpoint (its own config)");
  cmd->add_flag("--overwrite", cli.overwrite, "Replace the run that --out holds (without it, such an --out is refused)")
      ->excludes(resume);
  add_threads_flag(*cmd, cli.threads);
  cmd->add_flag("--quiet", cli.quiet, "No progress output");
}

RunStart run_start(const BertCli& cli) { return cli::run_start(cli.resume, cli.overwrite); }

// The trainer's options from the command line, every flag checked (before any data is loaded).
BertTrainOptions train_options(const BertCli& cli) {
  BertTrainOptions o = cli.opts;
  check(o.steps >= 1, "--steps: must be >= 1, got ", o.steps);
  check(o.batch >= 1, "--batch: must be >= 1, got ", o.batch);
  check_optim_flags({.lr = cli.lr, .min_lr = cli.min_lr, .weight_decay = o.adamw.weight_decay, .clip = o.clip,
                     .threads = cli.threads});
  check_non_negative(o.eval_every, "--eval-every");
  check_non_negative(o.checkpoint_every, "--checkpoint-every");
  check(o.eval_examples >= 1, "--eval-examples: must be >= 1, got ", o.eval_examples);
  const int64_t warmup = checked_warmup(cli.warmup, cli.warmup_given, o.steps, "--warmup", "--steps");
  o.out_dir = cli.out;
  o.start = run_start(cli);
  o.progress = !cli.quiet;
  o.batching = parse_batching(cli.batching);
  // A default warmup longer than the run: the schedule spans the warmup (as train gpt's).
  o.schedule = {.max_lr = cli.lr, .min_lr = cli.min_lr, .warmup_steps = warmup,
                .total_steps = std::max(o.steps, warmup)};
  check(std::isfinite(cli.dropout) && cli.dropout >= 0 && cli.dropout < 1, "--dropout: must be in [0, 1), got ",
        cli.dropout);
  return o;
}

// With --resume the run's own config (a --preset/--config that differs from it is an error);
// otherwise `given`.
BertConfig resumed_or(const BertConfig& given, const BertCli& cli, const RunDir& run) {
  if (run.start() != RunStart::kResume) return given;
  if (cli.preset_given || cli.config_given) run.check_config(bert_config_to_json(given));
  return parse_bert_config(run.checkpoint_config());
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
  BertConfig cfg = cli.config_file.empty() ? bert_preset(cli.preset) : parse_bert_config(read_file(cli.config_file, "--config"), cli.config_file);
  o.objective = parse_bert_objective(cli.objective);
  cfg.architecture = o.objective == BertObjective::kMlmNsp ? BertArchitecture::kPreTraining : BertArchitecture::kMaskedLM;
  if (cli.config_file.empty()) cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = cli.dropout;
  cfg = resumed_or(cfg, cli, run);
  check(cfg.vocab_size >= ByteTokenizer::vocab_size(), "config: vocab_size must be >= ",
        ByteTokenizer::vocab_size(), " for the byte tokenizer");
  ThreadCountScope threads(cli.threads);
  BertDocuments docs = split_documents(load_documents(cli.data), {});
  const size_t n_docs = docs.train.size();
  BertModel model(cfg);
  model.init_random(o.seed);
  BertTrainer trainer(model, std::move(docs), o);
  const int64_t start = cli.resume ? trainer.resume() : 0;
  if (start >= o.steps) {  // a finished run resumed again: nothing to train
    std::printf("%s is at step %lld of --steps %lld: nothing to train\n", o.out_dir.c_str(), (long long)start,
                (long long)o.steps);
    return;
  }
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
  ThreadCountScope threads(cli.threads);
  check(!cli.init.empty(), "--init: a pretrained BERT directory is required");
  require_model_kind(cli.init, ModelKind::kBert, "finetune bert --init");
  const BertModel pre = BertModel::load(cli.init);
  Task task = make_task(cli.task, cli.classes, o.max_len);
  o.objective = task.objective;
  BertConfig cfg = pre.config();
  cfg.architecture = task.architecture;
  cfg.labels = task.data.labels;
  cfg.num_labels = task.data.labels.empty() ? 2 : int64_t(task.data.labels.size());
  cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = cli.dropout;
  if (run.start() == RunStart::kResume) run.check_config(bert_config_to_json(cfg));  // same --init, task, dropout
  BertModel model(cfg);
  model.init_random(o.seed);  // the new heads (and the pooler if --init has none)
  const int64_t copied = model.copy_matching(pre);
  const size_t n_train = task.data.train.size(), n_val = task.data.validation.size();
  const BertTaskData data = task.data;  // kept for the baseline
  BertTrainer trainer(model, std::move(task.data), o);
  const int64_t start = cli.resume ? trainer.resume() : 0;
  if (start >= o.steps) {  // a finished run resumed again: nothing to train
    std::printf("%s is at step %lld of --steps %lld: nothing to train\n", o.out_dir.c_str(), (long long)start,
                (long long)o.steps);
    return;
  }
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

void run_bert_eval(const std::string& dir, const std::vector<std::string>& data, int64_t examples) {
  BertModel model = BertModel::load(dir);
  const BertConfig& cfg = model.config();
  BertTrainOptions o;
  o.out_dir = dir;
  o.batch = 16;
  o.max_len = cfg.max_position_embeddings;
  o.eval_examples = examples;
  if (!cfg.has_mlm()) {
    const std::string name = cfg.architecture == BertArchitecture::kSequenceClassification ? "fortune-file"
                             : cfg.architecture == BertArchitecture::kTokenClassification ? "attribution-tokens"
                                                                                          : "attribution-span";
    check(name != "fortune-file" || int64_t(cfg.labels.size()) == cfg.num_labels, "eval: ", dir,
          "/config.json has no id2label (the fortunes files of the fortune-file task)");
    Task task = make_task(name, cfg.labels, o.max_len);
    o.objective = task.objective;
    const BertTaskData data = task.data;
    BertTrainer t(model, std::move(task.data), o);
    print_task_metrics(name, t.evaluate(int64_t(data.validation.size())), data);
    return;
  }
  check(cfg.has_mlm(), "eval: ", bert_architecture_name(cfg.architecture), " is not supported by eval");
  o.objective = cfg.architecture == BertArchitecture::kPreTraining ? BertObjective::kMlmNsp : BertObjective::kMlm;
  BertTrainer t(model, split_documents(load_documents(data), {}), o);
  const BertEvalResult r = t.evaluate(examples);
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
  bert->add_option("--config", cli->config_file, "config.json (Hugging Face BertConfig keys) instead of --preset");
  bert->add_option("--preset", cli->preset, "Model shape: tiny, mini, small")->capture_default_str();
  bert->add_option("--data", cli->data, "Text files, or 'fortunes' / 'bible' (Debian's corpora)")->capture_default_str();
  add_common_options(bert, *cli);
  bert->callback([cli, bert] {
    cli->preset_given = bert->count("--preset") > 0;
    cli->config_given = bert->count("--config") > 0;
    cli->warmup_given = bert->count("--warmup") > 0;
    run_pretrain(*cli);
  });

  auto ft_cli = std::make_shared<BertCli>();
  ft_cli->opts.steps = 200;
  ft_cli->lr = 3e-4, ft_cli->min_lr = 3e-5, ft_cli->warmup = 20;
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
    ft_cli->warmup_given = ftb->count("--warmup") > 0;
    run_finetune(*ft_cli);
  });
}

}  // namespace attnkit::cli
