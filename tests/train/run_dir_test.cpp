// RunDir: a checkpoint is committed as a whole (step directory, manifest, pointer), the model
// files at the top follow the pointer, older checkpoints are pruned, a killed run's temporaries
// and uncommitted checkpoints are removed at the next start, and every refusal rule holds.
#include "attnkit/train/run_dir.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "attnkit/core/error.hpp"
#include "test_dirs.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {
namespace fs = std::filesystem;

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// A checkpoint whose files hold `tag` (the component never parses them).
void commit(RunDir& run, int64_t step, const std::string& tag, uint64_t seed = 7) {
  const std::string tmp = run.begin_checkpoint(step);
  write(tmp + "/config.json", "{\"hidden_size\": 64}");
  write(tmp + "/model.safetensors", "model " + tag);
  write(tmp + "/optimizer.safetensors", "optimizer " + tag);
  run.commit_checkpoint(step, seed);
}

TEST(RunDir, CommitWritesAStepDirectoryAManifestAndThePointer) {
  const std::string d = fresh_dir("run_dir_commit");
  RunDir run(d, RunStart::kNew, "gpt");
  EXPECT_FALSE(fs::exists(d));  // the constructor only checks
  run.prepare();
  write(d + "/log.csv", "step\n0\n");
  commit(run, 2, "a");
  EXPECT_EQ(read(d + "/latest"), "checkpoint-2\n");
  EXPECT_EQ(entries(d), (std::set<std::string>{"checkpoint-2", "config.json", "latest", "log.csv",
                                               "model.safetensors"}));
  EXPECT_EQ(entries(d + "/checkpoint-2"), (std::set<std::string>{"config.json", "manifest.json",
                                                                 "model.safetensors", "optimizer.safetensors"}));
  EXPECT_EQ(read(d + "/model.safetensors"), "model a");
  const RunDir resumed(d, RunStart::kResume, "gpt");
  EXPECT_EQ(resumed.checkpoint_path(), d + "/checkpoint-2");
  EXPECT_EQ(resumed.manifest().step, 2);
  EXPECT_EQ(resumed.manifest().seed, 7u);
  EXPECT_EQ(resumed.manifest().log_bytes, 7);
  EXPECT_EQ(resumed.manifest().files.at("optimizer.safetensors"), int64_t(std::string("optimizer a").size()));
  fs::remove_all(d);
}

TEST(RunDir, TheNextCommitMovesThePointerAndPrunesTheOldCheckpoint) {
  const std::string d = fresh_dir("run_dir_prune");
  RunDir run(d, RunStart::kNew, "bert");
  run.prepare();
  commit(run, 2, "a");
  commit(run, 4, "b");
  EXPECT_EQ(read(d + "/latest"), "checkpoint-4\n");
  EXPECT_FALSE(fs::exists(d + "/checkpoint-2"));
  EXPECT_EQ(read(d + "/model.safetensors"), "model b");
  EXPECT_EQ(read(d + "/checkpoint-4/optimizer.safetensors"), "optimizer b");
  fs::remove_all(d);
}

TEST(RunDir, ANewRunRefusesADirectoryThatHoldsARun) {
  const std::string d = fresh_dir("run_dir_refuse_new");
  fs::create_directories(d);
  write(d + "/notes.txt", "not a run file");
  EXPECT_EQ(error_of([&] { RunDir(d, RunStart::kNew, "gpt"); }), "");  // unrelated files are fine
  write(d + "/log.csv", "step,loss\n");  // a run that failed before its first step: nothing to keep
  EXPECT_EQ(error_of([&] { RunDir(d, RunStart::kNew, "gpt"); }), "");
  write(d + "/log.csv", "step,loss\n1,5.5\n");
  const std::string e = error_of([&] { RunDir(d, RunStart::kNew, "gpt"); });
  EXPECT_NE(e.find(d), std::string::npos) << e;
  EXPECT_NE(e.find("--resume"), std::string::npos) << e;
  EXPECT_NE(e.find("--overwrite"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  fs::remove_all(d);
}

// An input (--init) in --out or below it could be overwritten or removed by the run: refused,
// however the path is spelt; a sibling whose name starts like --out's is fine.
TEST(RunDir, InputsMustLieOutsideTheRunDirectory) {
  const std::string d = fresh_dir("run_dir_inputs");
  fs::create_directories(d + "/checkpoint-2");
  fs::create_directories(d + "-other");
  const RunDir run(d, RunStart::kOverwrite, "gpt");
  for (const std::string& inside : {d, d + "/", d + "/checkpoint-2", d + "/./checkpoint-2/../checkpoint-2",
                                    d + "/not-there"})
    expect_error([&] { run.check_input_outside(inside, "--init"); }, "lies in --out");
  EXPECT_EQ(error_of([&] { run.check_input_outside(d + "-other", "--init"); }), "");
  EXPECT_EQ(error_of([&] { run.check_input_outside(fs::path(d).parent_path().string(), "--init"); }), "");
  fs::remove_all(d);
  fs::remove_all(d + "-other");
}

TEST(RunDir, OverwriteRemovesTheRunsFilesOnly) {
  const std::string d = fresh_dir("run_dir_overwrite");
  RunDir first(d, RunStart::kNew, "gpt");
  first.prepare();
  commit(first, 3, "a");
  write(d + "/notes.txt", "mine");
  write(d + "/model.safetensors.tmp.Xy12ab", "litter");
  RunDir again(d, RunStart::kOverwrite, "gpt");
  EXPECT_TRUE(fs::exists(d + "/latest"));  // nothing removed before prepare()
  again.prepare();
  EXPECT_EQ(entries(d), std::set<std::string>{"notes.txt"});
  // An overwrite killed after it removed the pointer: no committed checkpoint, whatever is left.
  RunDir third(d, RunStart::kNew, "gpt");
  third.prepare();
  commit(third, 2, "b");
  fs::remove(d + "/latest");
  EXPECT_NE(error_of([&] { RunDir(d, RunStart::kResume, "gpt"); }).find("no committed checkpoint"), std::string::npos);
  fs::remove_all(d);
}

TEST(RunDir, ResumeRefusesWhatIsMissingOrInconsistent) {
  const std::string d = fresh_dir("run_dir_refuse_resume");
  auto refusal = [&] { return error_of([&] { RunDir(d, RunStart::kResume, "gpt"); }); };
  EXPECT_NE(refusal().find("does not exist"), std::string::npos);
  fs::create_directories(d);
  EXPECT_NE(refusal().find("holds no training run"), std::string::npos);
  write(d + "/optimizer.safetensors", "old layout");
  EXPECT_NE(refusal().find("older attnkit"), std::string::npos);
  fs::remove(d + "/optimizer.safetensors");
  write(d + "/log.csv", "step\n0\n");
  EXPECT_NE(refusal().find("no committed checkpoint"), std::string::npos);
  {
    RunDir run(d, RunStart::kOverwrite, "gpt");
    run.prepare();
    commit(run, 4, "a");
  }
  EXPECT_EQ(refusal(), "");
  EXPECT_NE(error_of([&] { RunDir(d, RunStart::kResume, "bert"); }).find("holds a gpt run"), std::string::npos);
  write(d + "/checkpoint-4/optimizer.safetensors", "optimizer a, changed");
  EXPECT_NE(refusal().find("its manifest says"), std::string::npos);
  fs::remove(d + "/checkpoint-4/optimizer.safetensors");
  EXPECT_NE(refusal().find("optimizer.safetensors is missing"), std::string::npos);
  write(d + "/checkpoint-4/optimizer.safetensors", "optimizer a");
  EXPECT_EQ(refusal(), "");
  fs::rename(d + "/checkpoint-4", d + "/checkpoint-5");
  write(d + "/latest", "checkpoint-5\n");
  EXPECT_NE(refusal().find("is for step 4"), std::string::npos);
  write(d + "/latest", "checkpoint-4\n");
  EXPECT_NE(refusal().find("which does not exist"), std::string::npos);
  write(d + "/latest", "../elsewhere\n");
  EXPECT_NE(refusal().find("is damaged"), std::string::npos);
  fs::remove_all(d);
}

TEST(RunDir, ResumeChecksConfigOptimizerStepAndSeed) {
  const std::string d = fresh_dir("run_dir_checks");
  {
    RunDir run(d, RunStart::kNew, "image");
    run.prepare();
    commit(run, 6, "a", 3);
  }
  const RunDir run(d, RunStart::kResume, "image");
  EXPECT_EQ(error_of([&] { run.check_config("{ \"hidden_size\" : 64 }"); }), "");  // equal as JSON
  const std::string e = error_of([&] { run.check_config("{\"hidden_size\": 32}"); });
  EXPECT_NE(e.find("hidden_size: run 64, given 32"), std::string::npos) << e;
  EXPECT_EQ(error_of([&] { run.check_resumed(6, 3); }), "");
  EXPECT_NE(error_of([&] { run.check_resumed(5, 3); }).find("is at step 5, its manifest at step 6"), std::string::npos);
  EXPECT_NE(error_of([&] { run.check_resumed(6, 4); }).find("--seed: 4 differs from the run's seed 3"),
            std::string::npos);
  fs::remove_all(d);
}

TEST(RunDir, ResumeRemovesAKilledRunsTemporariesAndRestoresTheTopLevelFiles) {
  const std::string d = fresh_dir("run_dir_cleanup");
  {
    RunDir run(d, RunStart::kNew, "gpt");
    run.prepare();
    write(d + "/log.csv", "header\nrow 0\n");
    commit(run, 1, "a");
  }
  // What kills at every phase of the next checkpoints leave behind.
  write(d + "/log.csv", "header\nrow 0\nrow 1\nrow 2\n");
  fs::create_directories(d + "/.ckpt-3.tmp");
  write(d + "/.ckpt-3.tmp/model.safetensors.tmp.AbC123", "half");
  fs::create_directories(d + "/checkpoint-2");  // renamed, pointer not yet moved
  write(d + "/checkpoint-2/model.safetensors", "model b");
  write(d + "/latest.tmp", "checkpoint-2\n");
  write(d + "/config.json.tmp", "{");
  write(d + "/model.safetensors.tmp-publish", "model b");
  fs::remove(d + "/model.safetensors");
  RunDir run(d, RunStart::kResume, "gpt");
  EXPECT_EQ(run.manifest().step, 1);
  run.prepare();
  EXPECT_EQ(entries(d), (std::set<std::string>{"checkpoint-1", "config.json", "latest", "log.csv",
                                               "model.safetensors"}));
  EXPECT_EQ(read(d + "/model.safetensors"), "model a");
  EXPECT_EQ(read(d + "/log.csv"), "header\nrow 0\n");
  fs::remove_all(d);
}

TEST(RunDir, TheWriterNeedsAWritableOut) {
  const std::string d = fresh_dir("run_dir_writable");
  fs::create_directories(d);
  write(d + "/file", "x");
  const std::string e = error_of([&] { RunDir(d + "/file/sub", RunStart::kNew, "gpt"); });
  EXPECT_NE(e.find("is not a directory"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { RunDir(d + "/file", RunStart::kNew, "gpt"); }).find("is not a directory"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { RunDir(d + "/file/sub", RunStart::kNew, "gpt", false); }), "");  // not the writer
  EXPECT_EQ(error_of([&] { RunDir(d + "/new/deeper", RunStart::kNew, "gpt"); }), "");
  EXPECT_FALSE(fs::exists(d + "/new"));
  fs::remove_all(d);
}

}  // namespace
}  // namespace attnkit
