// BERT training: step s's examples → layout (pad / bucket / pack) → forward/backward, and the
// evaluation; the TrainingLoop clips, updates, logs and checkpoints (see bert_trainer.hpp).
#include "attnkit/train/bert_trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "attnkit/core/error.hpp"
#include "attnkit/core/rng.hpp"

namespace attnkit {
namespace {

constexpr uint64_t kValidationSalt = 0x56414C49444154ull;  // validation examples' seed offset
constexpr uint64_t kDropoutSalt = 0x44524F50ull;           // per-step dropout seed offset

}  // namespace

BertObjective parse_bert_objective(const std::string& name) {
  if (name == "mlm") return BertObjective::kMlm;
  if (name == "mlm+nsp") return BertObjective::kMlmNsp;
  fail("--objective: expected mlm or mlm+nsp, got '", name, "'");
}

double majority_baseline(const BertTaskData& t) {
  std::map<int32_t, int64_t> counts;
  auto labels_of = [](const BertExample& e) {
    return e.token_labels.empty() ? std::vector<int32_t>{e.label} : e.token_labels;
  };
  for (const auto& e : t.train)
    for (int32_t l : labels_of(e))
      if (l >= 0) ++counts[l];
  check(!counts.empty(), "majority_baseline: the task has no class labels");
  const int32_t major = std::max_element(counts.begin(), counts.end(), [](auto& a, auto& b) {
                          return a.second < b.second;
                        })->first;
  int64_t hit = 0, n = 0;
  for (const auto& e : t.validation)
    for (int32_t l : labels_of(e))
      if (l >= 0) hit += l == major, ++n;
  return n > 0 ? double(hit) / double(n) : 0;
}

BertTrainer::BertTrainer(BertModel& model, BertDocuments docs, const BertTrainOptions& o)
    : model_(model), docs_(std::move(docs)), options_(o), optimizer_(named_parameters(model), o.adamw),
      loop_(*this, optimizer_, loop_options()) {
  check(!fine_tuning(), "--objective: a task objective needs task examples, not documents");
  check(!docs_.train.empty(), "--data: the training split has no documents");
  check(!docs_.validation.empty(), "--data: the validation split has no documents (documents are split by a "
        "draw per document, so one file often has none): give more documents");
  check(o.objective == BertObjective::kMlm ? model.config().has_mlm()
                                           : model.config().architecture == BertArchitecture::kPreTraining,
        "--objective: ", o.objective == BertObjective::kMlm ? "mlm" : "mlm+nsp", " does not fit a ",
        bert_architecture_name(model.config().architecture));
  check_setup();
}

BertTrainer::BertTrainer(BertModel& model, BertTaskData task, const BertTrainOptions& o)
    : model_(model), task_(std::move(task)), options_(o), optimizer_(named_parameters(model), o.adamw),
      loop_(*this, optimizer_, loop_options()) {
  check(fine_tuning(), "--objective: pretraining objectives need documents, not task examples");
  check(!task_.train.empty() && !task_.validation.empty(), "task: need training and validation examples");
  const auto arch = model.config().architecture;
  const BertArchitecture want = o.objective == BertObjective::kClassify ? BertArchitecture::kSequenceClassification
                                : o.objective == BertObjective::kTokens ? BertArchitecture::kTokenClassification
                                                                        : BertArchitecture::kQuestionAnswering;
  check(arch == want, "task: needs a ", bert_architecture_name(want), " model, got ", bert_architecture_name(arch));
  check_setup();
}

bool BertTrainer::fine_tuning() const {
  return options_.objective == BertObjective::kClassify || options_.objective == BertObjective::kTokens ||
         options_.objective == BertObjective::kSpan;
}

void BertTrainer::check_setup() const {
  const auto& o = options_;
  check(o.batch >= 1, "--batch: must be >= 1");
  check(o.bucket_pool >= 1, "bucket_pool: must be >= 1");
  check(o.max_len >= 5 && o.max_len <= model_.config().max_position_embeddings,
        "--seq: must be in [5, max_position_embeddings = ", model_.config().max_position_embeddings, "]");
  for (const auto* set : {&task_.train, &task_.validation})
    for (const auto& e : *set)
      check(int64_t(e.tokens.size()) <= o.max_len, "task: an example has ", e.tokens.size(),
            " tokens > --seq ", o.max_len);
}

BertExample BertTrainer::example(uint64_t index, bool validation) const {
  if (fine_tuning()) {
    if (validation) return task_.validation[size_t(index)];
    const uint32_t bits = philox4x32(options_.seed, {uint32_t(index), uint32_t(index >> 32), 0x5441534Bu, 0})[0];
    return task_.train[size_t((uint64_t(bits) * task_.train.size()) >> 32)];
  }
  BertExampleOptions eo;
  eo.max_len = options_.max_len;
  eo.seed = validation ? options_.seed ^ kValidationSalt : options_.seed;
  eo.nsp = options_.objective == BertObjective::kMlmNsp;
  return make_bert_example(validation ? docs_.validation : docs_.train, {}, eo, index);
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

TrainingLoopOptions BertTrainer::loop_options() const {
  return {.steps = options_.steps, .eval_every = options_.eval_every, .checkpoint_every = options_.checkpoint_every,
          .clip = options_.clip, .seed = options_.seed, .out_dir = options_.out_dir, .start = options_.start,
          .progress = options_.progress, .progress_every = 10, .precision = options_.precision};
}

void BertTrainer::load_weights(const std::string& ckpt) {
  const BertModel saved = BertModel::load(ckpt);
  std::copy(saved.parameters().begin(), saved.parameters().end(), model_.parameters().begin());
}

float BertTrainer::forward_backward(int64_t s) {
  const std::vector<BertExample> ex = step_examples(s);
  const LaidOutBatch lb = lay_out(ex, options_.batching, options_.max_len);
  model_.set_training(true, options_.seed ^ (kDropoutSalt + uint64_t(s) * 0x9E3779B97F4A7C15ull));
  model_.zero_grad();
  const BertLosses l = model_.forward(lb.batch(), lb.targets());
  if (std::isfinite(l.total)) model_.backward();
  model_.set_training(false);
  last_.mlm_loss = l.mlm, last_.nsp_loss = l.nsp + l.task;
  last_.real_tokens = lb.real_tokens, last_.computed_tokens = lb.computed_tokens();
  last_.loss_positions = fine_tuning() ? int64_t(ex.size()) : l.mlm_count;
  return l.total;
}

BertStepResult BertTrainer::result(const StepRecord& r) const {
  BertStepResult out = last_;
  out.step = r.step, out.loss = r.loss, out.lr = r.lr, out.grad_norm = r.grad_norm, out.seconds = r.seconds;
  return out;
}

void BertTrainer::after_step(const StepRecord& r) {
  real_done_ += double(last_.real_tokens);
  seconds_done_ += r.seconds;
}

std::string BertTrainer::log_header() const {
  return "step,loss,mlm_loss,nsp_or_task_loss,lr,grad_norm,real_tokens,computed_tokens,"
         "loss_positions,seconds,val_loss,val_accuracy\n";
}

void BertTrainer::log_row(std::ostream& log, const StepRecord& r, bool evaluated) {
  const BertStepResult t = result(r);
  log << t.step << ',' << t.loss << ',' << t.mlm_loss << ',' << t.nsp_loss << ',' << t.lr << ',' << t.grad_norm
      << ',' << t.real_tokens << ',' << t.computed_tokens << ',' << t.loss_positions << ',' << t.seconds << ',';
  if (evaluated) log << val_.loss << ',' << val_.accuracy;
  else log << ',';
  log << '\n';
}

std::string BertTrainer::progress_text(const StepRecord& r, int64_t steps, const std::string& eta,
                                       bool evaluated) const {
  const std::string val = !evaluated ? std::string()
                          : " | val " + std::to_string(val_.loss) +
                                (val_.accuracy > 0 ? " acc " + std::to_string(val_.accuracy) : std::string());
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | lr %.2e | %.0f real tok/s | ETA %s%s",
                (long long)(r.step + 1), (long long)steps, r.loss, r.lr, real_done_ / seconds_done_, eta.c_str(),
                val.c_str());
  return line;
}

BertEvalResult BertTrainer::evaluate(int64_t max_examples) {
  const MatmulPrecisionScope precision(options_.precision);
  model_.set_training(false);
  BertEvalResult r;
  const auto obj = options_.objective;
  const int64_t n = fine_tuning() ? std::min<int64_t>(max_examples, int64_t(task_.validation.size())) : max_examples;
  double loss_sum = 0;
  int64_t correct = 0, judged = 0, real = 0, tp = 0, fp = 0, fn = 0;
  for (int64_t first = 0; first < n; first += options_.batch) {
    std::vector<BertExample> ex;
    for (int64_t i = first; i < std::min(n, first + options_.batch); ++i) ex.push_back(example(uint64_t(i), true));
    const LaidOutBatch lb = lay_out(ex, Batching::kPack, options_.max_len);
    const BertLosses l = model_.forward(lb.batch(), lb.targets());
    real += lb.real_tokens;
    if (obj == BertObjective::kMlm || obj == BertObjective::kMlmNsp) {
      loss_sum += double(l.mlm) * double(l.mlm_count);
      r.count += l.mlm_count;
    } else {
      loss_sum += double(l.task) * double(ex.size());
      r.count += int64_t(ex.size());
    }
    if (obj == BertObjective::kMlm) continue;
    const ConstView2 z = model_.task_logits();
    auto argmax_row = [&](int64_t row) {
      int64_t best = 0;
      for (int64_t k = 1; k < z.shape[1]; ++k)
        if (z(row, k) > z(row, best)) best = k;
      return int32_t(best);
    };
    if (obj == BertObjective::kMlmNsp || obj == BertObjective::kClassify) {
      const auto& truth = obj == BertObjective::kClassify ? lb.labels : lb.nsp;
      for (int64_t b = 0; b < z.shape[0]; ++b) correct += argmax_row(b) == truth[size_t(b)], ++judged;
    } else if (obj == BertObjective::kTokens) {
      for (int64_t t = 0; t < z.shape[0]; ++t) {
        const int32_t y = lb.token_labels[size_t(t)];
        if (y < 0) continue;
        const int32_t p = argmax_row(t);
        correct += p == y, ++judged;
        tp += p == 1 && y == 1, fp += p == 1 && y != 1, fn += p != 1 && y == 1;
      }
    } else {  // span: exact match of the argmax start and end within each sequence
      for (size_t b = 0; b < lb.seqs.size(); ++b) {
        const int64_t lo = lb.cu[size_t(lb.seqs[b])], hi = lb.cu[size_t(lb.seqs[b]) + 1];
        int64_t s = lo, e = lo;
        for (int64_t t = lo; t < hi; ++t) {
          if (z(t, 0) > z(s, 0)) s = t;
          if (z(t, 1) > z(e, 1)) e = t;
        }
        correct += s - lo == lb.starts[b] && e - lo == lb.ends[b], ++judged;
      }
    }
  }
  r.loss = r.count > 0 ? loss_sum / double(r.count) : 0;
  r.accuracy = judged > 0 ? double(correct) / double(judged) : 0;
  r.f1 = tp > 0 ? 2.0 * double(tp) / double(2 * tp + fp + fn) : 0;
  r.loss_fraction = fine_tuning() ? 0 : double(r.count) / double(real);
  return r;
}

}  // namespace attnkit
