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
#include "test_dirs.hpp"
#include "attnkit/core/file_io.hpp"

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

}  // namespace
}  // namespace attnkit
