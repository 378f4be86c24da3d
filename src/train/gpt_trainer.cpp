// GPT causal-LM training: step s's windows → forward/backward (the TrainingLoop clips, updates,
// evaluates, logs and checkpoints).
#include "attnkit/train/gpt_trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "attnkit/core/error.hpp"
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

}  // namespace

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
      optimizer_(named_parameters(model), options.adamw),
      loop_(*this, optimizer_,
            {.steps = options.steps, .eval_every = options.eval_every,
             .checkpoint_every = options.checkpoint_every, .clip = options.clip, .seed = options.seed,
             .out_dir = options.out_dir, .start = options.start,
             .writer = options.dp_rank == 0 && options.tp_rank == 0, .collective_save = bool(options.tp_save),
             .progress = options.progress, .progress_every = std::max<int64_t>(10, options.steps / 20),
            .precision = options.precision}) {
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

std::string GptTrainer::config_json() const {
  // Tensor parallel: tp_load splits the whole-model checkpoint into this shard and checks the config.
  return options_.tp_load ? std::string() : gpt_config_to_json(model_.config());
}

void GptTrainer::load_weights(const std::string& ckpt) {
  const GptModel saved = GptModel::load(ckpt);
  std::copy(saved.parameters().begin(), saved.parameters().end(), model_.parameters().begin());
}

void GptTrainer::load_checkpoint(AdamW& optimizer, const std::string& ckpt) {
  if (options_.tp_load) return options_.tp_load(optimizer, ckpt);
  TrainingTask::load_checkpoint(optimizer, ckpt);
}

void GptTrainer::save_checkpoint_files(AdamW& optimizer, const std::string& dir, int64_t step) {
  if (options_.tp_save) return options_.tp_save(optimizer, dir);  // collective; only rank 0 writes
  TrainingTask::save_checkpoint_files(optimizer, dir, step);
}

float GptTrainer::forward_backward(int64_t s) {
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
  step_tokens_ = int64_t(w.tokens.size());
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
  return loss;
}

double GptTrainer::clip_gradients(double clip) {
  if (!options_.tp_grad_norm) return TrainingTask::clip_gradients(clip);
  // The whole model's norm: every shard scales by the same factor.
  const double norm = options_.tp_grad_norm();
  const std::span<float> grads[] = {model_.gradients()};
  if (clip > 0) scale_to_max_norm(grads, clip, norm);
  return norm;
}

double GptTrainer::evaluate(int64_t windows) {
  const MatmulPrecisionScope precision(options_.precision);
  return evaluate_loss(model_, corpus_.tokens(Split::validation), options_.seq_len, windows);
}

void GptTrainer::after_step(const StepRecord& r) {
  tokens_done_ += double(options_.batch * options_.seq_len);
  seconds_done_ += r.seconds;
}

TrainStepResult GptTrainer::result(const StepRecord& r) const {  // tokens/s of all processes
  return {r.step, r.loss, r.lr, r.grad_norm, double(step_tokens_) * double(options_.dp_size) / r.seconds};
}

void GptTrainer::log_row(std::ostream& log, const StepRecord& r, bool evaluated) {
  const TrainStepResult t = result(r);
  log << t.step << ',' << t.loss << ',' << t.lr << ',' << t.grad_norm << ',' << t.tokens_per_second << ',';
  if (evaluated) log << val_loss_;
  log << '\n';
}

std::string GptTrainer::progress_text(const StepRecord& r, int64_t steps, const std::string& eta,
                                      bool evaluated) const {
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | ETA %s%s",
                (long long)(r.step + 1), (long long)steps, r.loss, r.lr, tokens_done_ / seconds_done_, eta.c_str(),
                evaluated ? (" | val " + std::to_string(val_loss_)).c_str() : "");
  return line;
}

}  // namespace attnkit
