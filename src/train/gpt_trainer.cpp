// GPT causal-LM training loop: windows → forward/backward → clip → AdamW; eval, log, checkpoints.
#include "attnkit/train/gpt_trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

#include "attnkit/core/clock.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/nn/parallel_blocks.hpp"  // first_non_finite
#include "attnkit/train/grad_clip.hpp"

namespace attnkit {
namespace {

// Inputs, targets and cu_seqlens of B windows [B, M+1]: each window is its own sequence,
// `registers` ids first (target -1: never scored), then the window's M inputs.
struct Windows {
  std::vector<int32_t> tokens, targets, cu;
};

Windows split_windows(const Tensor<int32_t, 2>& rows, const std::vector<int32_t>& registers) {
  const int64_t b = rows.shape()[0], m = rows.shape()[1] - 1, k = int64_t(registers.size());
  Windows w;
  w.cu.push_back(0);
  for (int64_t r = 0; r < b; ++r) {
    const int32_t* row = rows.data() + r * (m + 1);
    w.tokens.insert(w.tokens.end(), registers.begin(), registers.end());
    w.targets.insert(w.targets.end(), size_t(k), -1);
    w.tokens.insert(w.tokens.end(), row, row + m);
    w.targets.insert(w.targets.end(), row + 1, row + m + 1);
    w.cu.push_back(int32_t((r + 1) * (m + k)));
  }
  return w;
}

std::string format_eta(double seconds) {
  const int64_t s = int64_t(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  return buf;
}

}  // namespace

std::vector<NamedParameter> gpt_named_parameters(GptModel& m) {
  std::vector<NamedParameter> out;
  // Tied embeddings are one tensor: each name appears once in the layout.
  for (const auto& p : m.parameter_info())
    out.push_back({p.name, m.parameters().subspan(size_t(p.offset), size_t(p.numel)),
                   std::span<const float>(m.gradients()).subspan(size_t(p.offset), size_t(p.numel))});
  return out;
}

double evaluate_loss(GptModel& model, std::span<const int32_t> tokens, int64_t seq_len,
                     int64_t max_windows) {
  const std::vector<int32_t> regs = gpt_register_ids(model.config());
  const int64_t text = seq_len - int64_t(regs.size());  // registers take the first positions
  check(text >= 1, "evaluate: seq_len ", seq_len, " leaves no room after ", regs.size(), " registers");
  const int64_t n = std::min(max_windows, num_sequential_windows(int64_t(tokens.size()), text));
  check(n >= 1, "evaluate: the data has fewer than ", text + 1, " tokens");
  double total = 0;
  Tensor<int32_t, 2> rows({1, text + 1});
  for (int64_t i = 0; i < n; ++i) {
    sequential_batch(tokens, i, rows.view());
    const Windows w = split_windows(rows, regs);
    total += model.forward({w.tokens, w.cu}, w.targets);
  }
  return total / double(n);
}

GptTrainer::GptTrainer(GptModel& model, const TextCorpus& corpus, const TrainOptions& options)
    : model_(model), corpus_(corpus), options_(options),
      optimizer_(gpt_named_parameters(model), options.adamw) {
  check(options.steps >= 1, "--steps: must be >= 1");
  check(options.batch >= 1, "--batch: must be >= 1");
  check(options.seq_len >= 1 && options.seq_len <= model.config().max_position_embeddings,
        "--seq: must be in [1, max_position_embeddings = ", model.config().max_position_embeddings, "]");
  check(options.seq_len > model.config().registers, "--seq: must exceed attnkit_registers = ",
        model.config().registers);
  check(!options.out_dir.empty(), "--out: a directory is required");
  check(options.dp_size >= 1 && options.dp_rank >= 0 && options.dp_rank < options.dp_size,
        "--dp: rank ", options.dp_rank, " of ", options.dp_size, " is out of range");
  check(options.batch % options.dp_size == 0, "--batch: ", options.batch, " must be a multiple of the ",
        options.dp_size, " data-parallel processes");
  const int64_t text = options.seq_len - model.config().registers;  // tokens of one window
  check(int64_t(corpus.tokens(Split::train).size()) > text, "--data: the training split has ",
        corpus.tokens(Split::train).size(), " tokens, fewer than one window of ", text + 1);
  check(int64_t(corpus.tokens(Split::validation).size()) > text, "--data: the validation split has ",
        corpus.tokens(Split::validation).size(), " tokens, fewer than one evaluation window of ", text + 1,
        " (documents are split by a 5 % draw per document, so one file often has none): give more documents");
  options_.schedule.total_steps = std::max(options_.schedule.total_steps, options_.schedule.warmup_steps);
}

int64_t GptTrainer::resume() {
  // Tensor parallel: tp_load splits the whole-model checkpoint into this shard and checks the config.
  const bool tp = bool(options_.tp_load);
  run_.emplace(resume_run(options_.out_dir, "gpt", writer(),
                          {.config_json = tp ? std::string() : gpt_config_to_json(model_.config()),
                           .load = [&](const std::string& ckpt) {
                             if (tp) {
                               options_.tp_load(optimizer_, ckpt);
                             } else {
                               const GptModel saved = GptModel::load(ckpt);
                               std::copy(saved.parameters().begin(), saved.parameters().end(),
                                         model_.parameters().begin());
                               optimizer_.load_state(ckpt + "/optimizer.safetensors");
                             }
                             return optimizer_.step_count();
                           },
                           .seed = options_.seed}));
  return next_step_ = optimizer_.step_count();
}

RunDir& GptTrainer::run_dir() { return open_run(run_, options_.out_dir, options_.start, "gpt", writer()); }

TrainStepResult GptTrainer::step(int64_t s) {
  const double t0 = now_seconds();
  const std::vector<int32_t> regs = gpt_register_ids(model_.config());
  const BatchSamplerOptions sampler{.batch = options_.batch, .seq_len = options_.seq_len - int64_t(regs.size()),
                                    .seed = options_.seed};
  Tensor<int32_t, 2> rows = sample_batch(corpus_.tokens(Split::train), sampler, uint64_t(s));
  if (options_.dp_size > 1) {  // data parallel: this process's share of the step's windows
    const int64_t share = options_.batch / options_.dp_size, width = rows.shape()[1];
    Tensor<int32_t, 2> mine({share, width});
    std::copy_n(rows.data() + options_.dp_rank * share * width, share * width, mine.data());
    rows = std::move(mine);
  }
  const Windows w = split_windows(rows, regs);
  model_.zero_grad();
  float loss = 0;
  try {
    loss = model_.forward({w.tokens, w.cu}, w.targets);
    if (std::isfinite(loss)) model_.backward();
  } catch (const Error& e) {  // activations overflowed (validated as non-finite) inside a layer
    const std::string what = e.what();
    if (what.find("non-finite") == std::string::npos) throw;
    fail("training diverged at step ", s, " (", what, "); the last good checkpoint in ",
         options_.out_dir, " is kept");
  }
  if (options_.dp_average) {  // equal token counts per process: mean of means = the batch mean
    options_.dp_average(model_.gradients());
    options_.dp_average({&loss, 1});
  }
  if (options_.tp_sync_gradients) options_.tp_sync_gradients();
  check(std::isfinite(loss), "training diverged at step ", s, ": loss = ", loss,
        "; the last good checkpoint in ", options_.out_dir, " is kept");
  std::vector<std::span<float>> grads{model_.gradients()};
  double norm = 0;
  if (options_.tp_grad_norm) {  // the whole model's norm: every shard scales by the same factor
    norm = options_.tp_grad_norm();
    if (options_.clip > 0) scale_to_max_norm(grads, options_.clip, norm);
  } else {
    norm = options_.clip > 0 ? clip_grad_norm(grads, options_.clip)
                             : global_grad_norm(std::vector<std::span<const float>>{model_.gradients()});
  }
  check(std::isfinite(norm), "training diverged at step ", s, ": gradient norm = ", norm,
        "; the last good checkpoint in ", options_.out_dir, " is kept");
  const double lr = warmup_cosine_lr(options_.schedule, s);
  optimizer_.step(lr);
  // An update can overflow even from a finite loss.
  if (const int64_t bad = nn::first_non_finite(model_.parameters()); bad >= 0)
    fail("training diverged at step ", s, ": a parameter became ", model_.parameters()[size_t(bad)],
         " (lr ", lr, "); the last good checkpoint in ", options_.out_dir, " is kept");
  const double dt = now_seconds() - t0;
  return {s, loss, lr, norm, double(w.tokens.size()) * double(options_.dp_size) / dt};  // all processes
}

double GptTrainer::evaluate(int64_t windows) {
  return evaluate_loss(model_, corpus_.tokens(Split::validation), options_.seq_len, windows);
}

void GptTrainer::save_checkpoint(int64_t completed) {
  check(optimizer_.step_count() == completed, "checkpoint: optimizer step mismatch");
  RunDir& run = run_dir();
  const std::string tmp = writer() ? run.begin_checkpoint(completed) : std::string();
  if (options_.tp_save) {
    options_.tp_save(optimizer_, tmp);  // collective; only rank 0 writes (into tmp)
  } else {
    model_.save(tmp);
    kill_point_for_tests(completed, "model");
    optimizer_.save_state(tmp + "/optimizer.safetensors");
  }
  if (writer()) run.commit_checkpoint(completed, options_.seed);
}

TrainStepResult GptTrainer::run() {
  const bool writer = this->writer();  // one process writes
  run_dir();
  const bool tty = isatty(fileno(stderr));
  std::ofstream log;
  if (writer) log.open(options_.out_dir + "/log.csv", next_step_ == 0 ? std::ios::trunc : std::ios::app);
  if (writer && next_step_ == 0) log << "step,loss,lr,grad_norm,tokens_per_s,val_loss\n";
  TrainStepResult last{};
  const double start = now_seconds();
  double tokens_done = 0;
  for (int64_t s = next_step_; s < options_.steps; ++s) {
    last = step(s);
    next_step_ = s + 1;
    tokens_done += double(options_.batch * options_.seq_len);
    const bool eval = (options_.eval_every > 0 && next_step_ % options_.eval_every == 0) ||
                      next_step_ == options_.steps;
    const double val = eval ? evaluate(options_.eval_windows) : NAN;
    log << s << ',' << last.loss << ',' << last.lr << ',' << last.grad_norm << ','
        << last.tokens_per_second << ',';
    if (eval) log << val;
    log << '\n' << std::flush;
    const bool checkpoint = (options_.checkpoint_every > 0 && next_step_ % options_.checkpoint_every == 0) ||
                            next_step_ == options_.steps;
    if (checkpoint && (writer || options_.tp_save)) save_checkpoint(next_step_);  // tp_save: collective
    // On a terminal the bar redraws every step; in a log, about 20 lines per run (at least 10 steps apart).
    const int64_t every = std::max<int64_t>(10, options_.steps / 20);
    if (writer && options_.progress && (tty || eval || s % every == 0)) {
      const double elapsed = now_seconds() - start;
      const double rate = tokens_done / elapsed;
      const double eta = double(options_.steps - next_step_) * options_.batch * options_.seq_len / rate;
      std::fprintf(stderr, "%sstep %lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | ETA %s%s%s",
                   tty ? "\r" : "", (long long)next_step_, (long long)options_.steps, last.loss,
                   last.lr, rate, format_eta(eta).c_str(),
                   eval ? (" | val " + std::to_string(val)).c_str() : "", tty ? "   " : "\n");
    }
  }
  if (writer && options_.progress && tty) std::fprintf(stderr, "\n");
  return last;
}

}  // namespace attnkit
