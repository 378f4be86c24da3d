// BERT training loop: examples → layout (pad / bucket / pack) → forward/backward → clip → AdamW;
// evaluation, CSV log, checkpoints (see bert_trainer.hpp).
#include "attnkit/train/bert_trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "attnkit/core/error.hpp"
#include "attnkit/tools/roofline.hpp"
#include "attnkit/train/grad_clip.hpp"

namespace attnkit {
namespace {

constexpr uint64_t kValidationSalt = 0x56414C49444154ull;  // validation examples' seed offset
constexpr uint64_t kDropoutSalt = 0x44524F50ull;           // per-step dropout seed offset

std::string format_eta(double seconds) {
  const int64_t s = int64_t(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  return buf;
}

}  // namespace

BertObjective parse_bert_objective(const std::string& name) {
  if (name == "mlm") return BertObjective::kMlm;
  if (name == "mlm+nsp") return BertObjective::kMlmNsp;
  fail("--objective: expected mlm or mlm+nsp, got '", name, "'");
}

std::vector<NamedParameter> bert_named_parameters(BertModel& m) {
  std::vector<NamedParameter> out;
  for (const auto& p : m.parameter_info())
    out.push_back({p.name, m.parameters().subspan(size_t(p.offset), size_t(p.numel)),
                   std::span<const float>(m.gradients()).subspan(size_t(p.offset), size_t(p.numel))});
  return out;
}

double majority_baseline(const BertDocuments& d) {
  check(!d.train_labels.empty() && !d.validation_labels.empty(), "majority_baseline: no labels");
  std::map<int32_t, int64_t> counts;
  for (int32_t l : d.train_labels) ++counts[l];
  const int32_t major = std::max_element(counts.begin(), counts.end(), [](auto& a, auto& b) {
                          return a.second < b.second;
                        })->first;
  return double(std::count(d.validation_labels.begin(), d.validation_labels.end(), major)) /
         double(d.validation_labels.size());
}

BertTrainer::BertTrainer(BertModel& model, const BertDocuments& docs, const BertTrainOptions& o)
    : model_(model), docs_(docs), options_(o), optimizer_(bert_named_parameters(model), o.adamw) {
  const auto arch = model.config().architecture;
  check(o.steps >= 1, "--steps: must be >= 1");
  check(o.batch >= 1, "--batch: must be >= 1");
  check(o.bucket_pool >= 1, "bucket_pool: must be >= 1");
  check(o.max_len >= 5 && o.max_len <= model.config().max_position_embeddings,
        "--seq: must be in [5, max_position_embeddings = ", model.config().max_position_embeddings, "]");
  check(!o.out_dir.empty(), "--out: a directory is required");
  check(!docs.train.empty() && !docs.validation.empty(), "data: need training and validation documents");
  if (o.objective == BertObjective::kClassify)
    check(arch == BertArchitecture::kSequenceClassification && !docs.train_labels.empty(),
          "fine-tuning needs a BertForSequenceClassification model and labelled documents");
  else
    check(o.objective == BertObjective::kMlm ? model.config().has_mlm() : arch == BertArchitecture::kPreTraining,
          "--objective: ", o.objective == BertObjective::kMlm ? "mlm" : "mlm+nsp", " does not fit a ",
          bert_architecture_name(arch));
  options_.schedule.total_steps = std::max(options_.schedule.total_steps, options_.schedule.warmup_steps);
}

BertExample BertTrainer::example(uint64_t index, bool validation) const {
  const auto& docs = validation ? docs_.validation : docs_.train;
  const auto& labels = validation ? docs_.validation_labels : docs_.train_labels;
  BertExampleOptions eo;
  eo.max_len = options_.max_len;
  eo.seed = validation ? options_.seed ^ kValidationSalt : options_.seed;
  eo.nsp = options_.objective == BertObjective::kMlmNsp;
  eo.mlm = options_.objective != BertObjective::kClassify;
  if (options_.objective == BertObjective::kClassify)
    return make_bert_example(docs, labels, eo, index);
  return make_bert_example(docs, {}, eo, index);
}

std::vector<BertExample> BertTrainer::step_examples(int64_t s) const {
  const int64_t b = options_.batch;
  std::vector<BertExample> out;
  if (options_.batching != Batching::kBucket) {
    for (int64_t k = 0; k < b; ++k) out.push_back(example(uint64_t(s * b + k), false));
    return out;
  }
  const int64_t pool = s / options_.bucket_pool, first = pool * options_.bucket_pool * b;
  std::vector<BertExample> all;
  std::vector<int64_t> lengths;
  for (int64_t k = 0; k < options_.bucket_pool * b; ++k) {
    all.push_back(example(uint64_t(first + k), false));
    lengths.push_back(int64_t(all.back().tokens.size()));
  }
  const auto order = bucket_order(lengths, b, options_.seed ^ uint64_t(pool));
  const int64_t j = s % options_.bucket_pool;
  for (int64_t k = j * b; k < (j + 1) * b; ++k) out.push_back(std::move(all[size_t(order[size_t(k)])]));
  return out;
}

int64_t BertTrainer::resume() {
  namespace fs = std::filesystem;
  const std::string opt = options_.out_dir + "/optimizer.safetensors";
  if (!fs::exists(opt)) return next_step_ = 0;
  BertModel saved = BertModel::load(options_.out_dir);
  check(saved.parameters().size() == model_.parameters().size(),
        "resume: the checkpoint in ", options_.out_dir, " has a different model shape");
  std::copy(saved.parameters().begin(), saved.parameters().end(), model_.parameters().begin());
  optimizer_.load_state(opt);
  return next_step_ = optimizer_.step_count();
}

BertStepResult BertTrainer::step(int64_t s) {
  const double t0 = now_seconds();
  const std::vector<BertExample> ex = step_examples(s);
  const LaidOutBatch lb = lay_out(ex, options_.batching, options_.max_len);
  model_.set_training(true, options_.seed ^ (kDropoutSalt + uint64_t(s) * 0x9E3779B97F4A7C15ull));
  model_.zero_grad();
  const BertLosses l = model_.forward(lb.batch(), lb.targets());
  const auto kept = "; the last good checkpoint in " + options_.out_dir + " is kept";
  check(std::isfinite(l.total), "training diverged at step ", s, ": loss = ", l.total, kept);
  model_.backward();
  model_.set_training(false);
  std::vector<std::span<float>> grads{model_.gradients()};
  const double norm = options_.clip > 0 ? clip_grad_norm(grads, options_.clip)
                                        : global_grad_norm(std::vector<std::span<const float>>{model_.gradients()});
  check(std::isfinite(norm), "training diverged at step ", s, ": gradient norm = ", norm, kept);
  const double lr = warmup_cosine_lr(options_.schedule, s);
  optimizer_.step(lr);
  BertStepResult r;
  r.step = s, r.loss = l.total, r.mlm_loss = l.mlm, r.nsp_loss = l.nsp + l.task, r.lr = lr, r.grad_norm = norm;
  r.real_tokens = lb.real_tokens, r.computed_tokens = lb.computed_tokens();
  r.loss_positions = options_.objective == BertObjective::kClassify ? int64_t(ex.size()) : l.mlm_count;
  r.seconds = now_seconds() - t0;
  return r;
}

BertEvalResult BertTrainer::evaluate(int64_t max_examples) {
  model_.set_training(false);
  BertEvalResult r;
  const bool classify = options_.objective == BertObjective::kClassify;
  const int64_t n = classify ? std::min<int64_t>(max_examples, int64_t(docs_.validation.size())) : max_examples;
  double loss_sum = 0;
  int64_t correct = 0, real = 0;
  for (int64_t first = 0; first < n; first += options_.batch) {
    std::vector<BertExample> ex;
    for (int64_t i = first; i < std::min(n, first + options_.batch); ++i)
      ex.push_back(classify ? document_example(docs_.validation[size_t(i)], docs_.validation_labels[size_t(i)],
                                               options_.max_len)
                            : example(uint64_t(i), true));
    const LaidOutBatch lb = lay_out(ex, Batching::kPack, options_.max_len);
    const BertLosses l = model_.forward(lb.batch(), lb.targets());
    real += lb.real_tokens;
    const auto& truth = classify ? lb.labels : lb.nsp;
    if (classify || options_.objective == BertObjective::kMlmNsp) {
      const ConstView2 z = model_.task_logits();
      for (int64_t b = 0; b < z.shape[0]; ++b) {
        int64_t best = 0;
        for (int64_t k = 1; k < z.shape[1]; ++k)
          if (z(b, k) > z(b, best)) best = k;
        correct += best == truth[size_t(b)];
      }
    }
    if (classify) {
      loss_sum += double(l.task) * double(ex.size());
      r.count += int64_t(ex.size());
    } else {
      loss_sum += double(l.mlm) * double(l.mlm_count);
      r.count += l.mlm_count;
    }
  }
  r.loss = r.count > 0 ? loss_sum / double(r.count) : 0;
  r.accuracy = classify || options_.objective == BertObjective::kMlmNsp ? double(correct) / double(n) : 0;
  r.loss_fraction = classify ? 0 : double(r.count) / double(real);
  return r;
}

void BertTrainer::save_checkpoint(int64_t completed) {
  model_.save(options_.out_dir);
  check(optimizer_.step_count() == completed, "checkpoint: optimizer step mismatch");
  optimizer_.save_state(options_.out_dir + "/optimizer.safetensors");
}

BertStepResult BertTrainer::run() {
  namespace fs = std::filesystem;
  fs::create_directories(options_.out_dir);
  const bool tty = isatty(fileno(stderr));
  std::ofstream log(options_.out_dir + "/log.csv", next_step_ == 0 ? std::ios::trunc : std::ios::app);
  if (next_step_ == 0)
    log << "step,loss,mlm_loss,nsp_or_task_loss,lr,grad_norm,real_tokens,computed_tokens,"
           "loss_positions,seconds,val_loss,val_accuracy\n";
  BertStepResult last{};
  double real_done = 0, seconds = 0;
  int64_t done = 0;
  for (int64_t s = next_step_; s < options_.steps; ++s) {
    last = step(s);
    next_step_ = s + 1;
    real_done += double(last.real_tokens);
    ++done;
    seconds += last.seconds;
    const bool eval = (options_.eval_every > 0 && next_step_ % options_.eval_every == 0) ||
                      next_step_ == options_.steps;
    const BertEvalResult val = eval ? evaluate(options_.eval_examples) : BertEvalResult{};
    log << s << ',' << last.loss << ',' << last.mlm_loss << ',' << last.nsp_loss << ',' << last.lr << ','
        << last.grad_norm << ',' << last.real_tokens << ',' << last.computed_tokens << ','
        << last.loss_positions << ',' << last.seconds << ',';
    if (eval) log << val.loss << ',' << val.accuracy;
    else log << ',';
    log << '\n' << std::flush;
    if ((options_.checkpoint_every > 0 && next_step_ % options_.checkpoint_every == 0) ||
        next_step_ == options_.steps)
      save_checkpoint(next_step_);
    if (options_.progress && (tty || eval || s % 10 == 0)) {
      const double rate = real_done / seconds;
      std::fprintf(stderr, "%sstep %lld/%lld | loss %.4f | lr %.2e | %.0f real tok/s | ETA %s%s%s",
                   tty ? "\r" : "", (long long)next_step_, (long long)options_.steps, last.loss, last.lr, rate,
                   format_eta(double(options_.steps - next_step_) * seconds / double(done)).c_str(),
                   eval ? (" | val " + std::to_string(val.loss) +
                           (val.accuracy > 0 ? " acc " + std::to_string(val.accuracy) : std::string()))
                              .c_str()
                        : "",
                   tty ? "   " : "\n");
    }
  }
  if (options_.progress && tty) std::fprintf(stderr, "\n");
  return last;
}

}  // namespace attnkit
