// TrainingLoop with a toy task (loss ½·Σp², gradient p): evaluation and checkpoint cadence, log
// rows, clipping, resume to the same parameters, and the divergence checks.
#include "attnkit/train/training_loop.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/weight_pack_cache.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/ops/gemm.hpp"
#include "test_dirs.hpp"
#include "attnkit/core/file_io.hpp"
#include "test_compare.hpp"

namespace attnkit {
namespace {
namespace fs = std::filesystem;

class Quadratic : public TrainingTask {
 public:
  std::vector<float> p{3, -4, 1, 2}, g = std::vector<float>(4);
  std::vector<int64_t> evaluated_after;  // steps completed at each evaluation
  float poison = 0;                      // added to the loss (NaN: diverge)

  const char* trainer() const override { return "gpt"; }
  std::string config_json() const override { return "{\"model_type\": \"toy\"}"; }
  float forward_backward(int64_t) override {
    double loss = 0;
    for (size_t i = 0; i < p.size(); ++i) g[i] = p[i], loss += 0.5 * double(p[i]) * p[i];
    return float(loss) + poison;
  }
  std::span<float> gradients() override { return g; }
  std::span<const float> parameters() override { return p; }
  double learning_rate(int64_t step) const override { return 0.1; }
  void after_step(const StepRecord& r) override { last_step = r.step; }
  void evaluate() override { evaluated_after.push_back(last_step + 1); }
  std::string log_header() const override { return "step,loss\n"; }
  void log_row(std::ostream& log, const StepRecord& r, bool evaluated) override {
    log << r.step << ',' << r.loss << (evaluated ? ",eval" : "") << '\n';
  }
  std::string progress_text(const StepRecord&, int64_t, const std::string&, bool) const override { return ""; }
  void save_model(const std::string& dir) override {
    std::ofstream(dir + "/config.json") << config_json();
    std::ofstream(dir + "/model.safetensors", std::ios::binary)
        .write(reinterpret_cast<const char*>(p.data()), std::streamsize(p.size() * sizeof(float)));
  }
  void load_weights(const std::string& dir) override {
    std::ifstream(dir + "/model.safetensors", std::ios::binary)
        .read(reinterpret_cast<char*>(p.data()), std::streamsize(p.size() * sizeof(float)));
  }

 private:
  int64_t last_step = -1;
};

struct ToyRun {
  Quadratic task;
  AdamW optimizer{{{"p", task.p, task.g}}, {.weight_decay = 0}};
  TrainingLoop loop;
  explicit ToyRun(TrainingLoopOptions o) : loop(task, optimizer, std::move(o)) {}
};

TrainingLoopOptions options(const std::string& dir, int64_t steps) {
  return {.steps = steps, .eval_every = 3, .checkpoint_every = 4, .clip = 1.0, .seed = 5, .out_dir = dir,
          .progress = false};
}

TEST(TrainingLoop, EvaluatesLogsAndCheckpointsAtItsCadence) {
  const std::string dir = fresh_dir("training_loop_cadence");
  ToyRun run(options(dir, 7));
  const StepRecord last = run.loop.run();
  EXPECT_EQ(last.step, 6);
  EXPECT_EQ(run.task.evaluated_after, (std::vector<int64_t>{3, 6, 7}));  // every 3, and the end
  EXPECT_EQ(read_file(dir + "/latest"), "checkpoint-7\n");                    // 4, then the end
  const std::string log = read_file(dir + "/log.csv");
  EXPECT_EQ(log.substr(0, 10), "step,loss\n");
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 8);
  int evals = 0;
  for (size_t at = log.find(",eval"); at != std::string::npos; at = log.find(",eval", at + 1)) ++evals;
  EXPECT_EQ(evals, 3);
  fs::remove_all(dir);
}

TEST(TrainingLoop, ClipsToTheBoundAndReportsTheNormBefore) {
  const std::string dir = fresh_dir("training_loop_clip");
  ToyRun run(options(dir, 1));
  const StepRecord r = run.loop.step(0);
  EXPECT_DOUBLE_EQ(r.grad_norm, std::sqrt(9.0 + 16 + 1 + 4));
  double clipped = 0;
  for (float v : run.task.g) clipped += double(v) * v;
  EXPECT_NEAR(std::sqrt(clipped), 1.0, 1e-6);
  EXPECT_EQ(r.lr, 0.1);
}

TEST(TrainingLoop, ResumeContinuesToTheSameParameters) {
  const std::string a = fresh_dir("training_loop_full"), b = fresh_dir("training_loop_resumed");
  ToyRun full(options(a, 8));
  full.loop.run();
  {
    ToyRun first(options(b, 4));
    first.loop.run();
  }
  TrainingLoopOptions o = options(b, 8);
  ToyRun second(o);
  second.task.p.assign(4, 0.0f);  // the weights come from the checkpoint
  EXPECT_EQ(second.loop.resume(), 4);
  second.loop.run();
  EXPECT_EQ(second.task.p, full.task.p);
  auto losses = [](std::string log) {  // the rows without the evaluation marks (the 4-step run ended at 4)
    for (size_t at; (at = log.find(",eval")) != std::string::npos;) log.erase(at, 5);
    return log;
  };
  EXPECT_EQ(losses(read_file(a + "/log.csv")), losses(read_file(b + "/log.csv")));
  fs::remove_all(a), fs::remove_all(b);
}

TEST(TrainingLoop, NonFiniteLossStopsAndKeepsTheLastCheckpoint) {
  const std::string dir = fresh_dir("training_loop_nan");
  {
    ToyRun first(options(dir, 4));
    first.loop.run();
  }
  const std::string before = read_file(dir + "/model.safetensors");
  ToyRun second(options(dir, 8));
  second.loop.resume();
  second.task.poison = NAN;
  try {
    second.loop.run();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training diverged at step 4: loss = nan"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(dir + "/model.safetensors"), before);
  EXPECT_EQ(read_file(dir + "/latest"), "checkpoint-4\n");
  fs::remove_all(dir);
}

TEST(TrainingLoop, HelpersAndBadOptions) {
  EXPECT_EQ(format_eta(187.9), "3m07s");
  EXPECT_EQ(format_eta(NAN), "0m00s");
  EXPECT_TRUE(due_after(6, 3, 10));
  EXPECT_FALSE(due_after(7, 3, 10));
  EXPECT_TRUE(due_after(10, 0, 10));
  EXPECT_FALSE(due_after(5, 0, 10));
  Quadratic task;
  AdamW opt({{"p", task.p, task.g}});
  EXPECT_THROW(TrainingLoop(task, opt, {.steps = 0, .out_dir = "x"}), Error);
  EXPECT_THROW(TrainingLoop(task, opt, {.steps = 1}), Error);
}

// The toy task with a linear layer: p is W [32, 32], loss ½·Σ_t |x_t·Wᵀ|² over 128 fixed tokens
// (gradient d_W = yᵀ·x). Each forward_backward runs the layer twice on the live weights (the
// second call is served by the step's packed W) and records how far y and d_x are from the float64
// reference on the weights as they are now: a packed W kept from an earlier step would be off by
// the optimizer's update, orders of magnitude above the float32 bar.
class LinearLayerTask : public Quadratic {
 public:
  static constexpr int64_t kT = 128, kC = 32;
  std::vector<float> x = std::vector<float>(size_t(kT * kC));
  double worst = 0;          // max over steps of |fast - reference| / float32 bar, y and d_x
  int64_t steps_with_cache = 0, cache_hits = 0;
  LinearLayerTask() {
    p.assign(size_t(kC * kC), 0), g.assign(size_t(kC * kC), 0);
    for (size_t i = 0; i < p.size(); ++i) p[i] = float(int(i * 37 % 19) - 9) / 16;
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 11 % 23) - 11) / 8;
  }
  float forward_backward(int64_t) override {
    WeightPackCache* cache = current_weight_pack_cache();
    steps_with_cache += cache != nullptr;
    const int64_t hits_before = cache ? cache->hits() : 0;
    const ConstView2 w = View2::contiguous(p.data(), {kC, kC}), xv = View2::contiguous(x.data(), {kT, kC});
    std::vector<float> y(size_t(kT * kC)), y_ref(y.size()), d_x(x.size()), d_x_ref(x.size());
    const View2 yv = View2::contiguous(y.data(), {kT, kC});
    linear_forward(yv, xv, w, {});
    linear_forward(yv, xv, w, {});
    linear_forward_reference(View2::contiguous(y_ref.data(), {kT, kC}), xv, w, {});
    std::fill(g.begin(), g.end(), 0.0f);
    linear_backward(View2::contiguous(d_x.data(), {kT, kC}), View2::contiguous(g.data(), {kC, kC}), {},
                    yv, xv, w);
    std::vector<float> g_ref(g.size());
    linear_backward_reference(View2::contiguous(d_x_ref.data(), {kT, kC}),
                              View2::contiguous(g_ref.data(), {kC, kC}), {}, yv, xv, w);
    if (cache) cache_hits += cache->hits() - hits_before;
    // Bars: (k + 2)·u·Σ|terms|, bounded by (k + 2)·u·k·max|a|·max|b| per element.
    const double u = 0x1p-24;
    auto max_abs = [](const std::vector<float>& v) {
      double m = 0;
      for (float e : v) m = std::max(m, double(std::fabs(e)));
      return m;
    };
    const double bar_y = double(kC + 2) * u * double(kC) * max_abs(x) * max_abs(p);
    const double bar_dx = double(kC + 2) * u * double(kC) * max_abs(y_ref) * max_abs(p);
    double loss = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      worst = worse_error(worst, std::fabs(double(y[i]) - y_ref[i]) / bar_y);
      worst = worse_error(worst, std::fabs(double(d_x[i]) - d_x_ref[i]) / bar_dx);
      loss += 0.5 * double(y_ref[i]) * y_ref[i];
    }
    return float(loss);
  }
};

TEST(TrainingLoop, PackedWeightsAreReusedWithinAStepAndNeverAcrossSteps) {
  const std::string dir = fresh_dir("training_loop_packed_weights");
  LinearLayerTask task;
  AdamW optimizer{{{"w", task.p, task.g}}, {.weight_decay = 0}};
  TrainingLoop loop(task, optimizer, {.steps = 4, .clip = 0, .seed = 5, .out_dir = dir, .progress = false});
  const std::vector<float> w0 = task.p;
  for (int64_t s = 0; s < 4; ++s) {
    loop.step(s);
    EXPECT_EQ(current_weight_pack_cache(), nullptr);  // never current outside a step
  }
  EXPECT_NE(task.p, w0);  // the optimizer moved W (lr 0.1): a stale packing would be far off
  EXPECT_EQ(task.steps_with_cache, 4);
  if (packed_gemm_applies(LinearLayerTask::kT, LinearLayerTask::kC, LinearLayerTask::kC)) {
    EXPECT_GE(task.cache_hits, 4);  // the second forward of each step reused the packed W
  }
  EXPECT_LE(task.worst, 1.0);
  // Outside a step the layer packs the weights it is given, also after writes in place.
  task.p[3] += 1.0f;
  task.worst = 0;
  task.forward_backward(4);
  EXPECT_LE(task.worst, 1.0);
}

}  // namespace
}  // namespace attnkit
