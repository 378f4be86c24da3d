// Run directory: the refusal rules checked before a run starts, the checkpoint to resume from,
// and the clean-up of a killed run (see run_dir.hpp; commits are in run_dir_commit.cpp).
#include "attnkit/train/run_dir.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "attnkit/core/error.hpp"
#include "run_dir_fs.hpp"

namespace attnkit {
namespace fs = std::filesystem;
using namespace run_dir_fs;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(bool(in), "cannot read ", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> sorted_entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  check(!ec, "cannot list ", dir, ": ", ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

// The writer can create or write `dir`: an existing directory it may write, or a path whose
// nearest existing ancestor is such a directory.
void check_writable(const std::string& dir) {
  fs::path p = fs::absolute(dir);
  std::error_code ec;
  if (fs::exists(p, ec)) {
    check(fs::is_directory(p, ec), "--out: ", dir, " exists and is not a directory");
    check(::access(p.c_str(), W_OK | X_OK) == 0, "--out: ", dir, " is not writable");
    return;
  }
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  check(fs::is_directory(p, ec), "--out: cannot create ", dir, ": ", p.string(), " is not a directory");
  check(::access(p.c_str(), W_OK | X_OK) == 0, "--out: cannot create ", dir, ": ", p.string(),
        " is not writable");
}

CheckpointManifest parse_manifest(const std::string& path) {
  CheckpointManifest m;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_text(path));
    m.trainer = j.at("trainer").get<std::string>();
    m.step = j.at("step").get<int64_t>();
    m.seed = j.at("seed").get<uint64_t>();
    m.log_bytes = j.at("log_bytes").get<int64_t>();
    for (const auto& [name, size] : j.at("files").items()) m.files[name] = size.get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail("--resume: ", path, " is not a valid checkpoint manifest (", e.what(), ")");
  }
  return m;
}

// "key: run A, given B" for up to three keys where two JSON objects differ.
std::string json_differences(const nlohmann::json& run, const nlohmann::json& given) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : run.items()) keys.push_back(k);
  for (const auto& [k, v] : given.items())
    if (!run.contains(k)) keys.push_back(k);
  std::string out;
  int n = 0;
  for (const std::string& k : keys) {
    const nlohmann::json a = run.value(k, nlohmann::json()), b = given.value(k, nlohmann::json());
    if (a == b) continue;
    if (n++ == 3) return out + "; ...";
    out += (out.empty() ? "" : "; ") + k + ": run " + a.dump() + ", given " + b.dump();
  }
  return out;
}

// Whether the file at `path` has at most one line (a header without rows); false if unreadable.
bool at_most_one_line(const std::string& path) {
  std::ifstream f(path);
  if (!f) return false;
  std::string line;
  int lines = 0;
  while (lines < 2 && std::getline(f, line)) lines += !line.empty();
  return lines <= 1;
}

}  // namespace

std::string run_files_in(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  std::string out;
  int shown = 0;
  for (const std::string& name : sorted_entries(dir)) {
    if (!is_run_file(name)) continue;
    if (shown++ < 4) out += (out.empty() ? "" : ", ") + name;
    else if (shown == 5) out += ", ...";
  }
  return out;
}

void RunDir::check_input_outside(const std::string& input, const char* flag) const {
  std::error_code ec_in, ec_out;
  const fs::path in = fs::weakly_canonical(input, ec_in), out = fs::weakly_canonical(dir_, ec_out);
  if (ec_in || ec_out) return;  // unreadable paths: the loading step reports them
  auto strip = [](const fs::path& p) { return p.has_filename() ? p : p.parent_path(); };
  const fs::path a = strip(out), b = strip(in);
  const bool inside = std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first == a.end();
  check(!inside, flag, ": ", input, " lies in --out ", dir_,
        ", where the run writes its files (and --overwrite removes them); use another --out or copy ",
        flag, " elsewhere first");
}

RunDir::RunDir(std::string dir, RunStart start, std::string trainer, bool writer)
    : dir_(std::move(dir)), trainer_(std::move(trainer)), start_(start), writer_(writer) {
  check(!dir_.empty(), "--out: a directory is required");
  if (writer_) check_writable(dir_);
  std::error_code ec;
  if (start_ == RunStart::kNew) {
    const std::string held = writer_ ? run_files_in(dir_) : std::string();
    // A log.csv of at most its header line is what a run that failed before its first step
    // leaves: nothing to lose, and the new run rewrites it.
    check(held.empty() || (held == "log.csv" && at_most_one_line(dir_ + "/log.csv")), "--out: ", dir_,
          " already holds a training run (", held, "); pass --resume to continue it or --overwrite to replace it");
    return;
  }
  if (start_ == RunStart::kOverwrite) return;
  check(fs::is_directory(dir_, ec), "--resume: ", dir_, " does not exist; there is nothing to resume (drop --resume to start a new run)");
  const std::string latest = dir_ + "/" + kLatest;
  if (!fs::exists(latest, ec)) {
    check(!fs::exists(dir_ + "/" + kOptimizer, ec), "--resume: ", dir_,
          " is a run directory of an older attnkit (optimizer.safetensors beside the model, no 'latest' "
          "checkpoint pointer): its model and optimizer state may be from different steps, so it cannot be "
          "resumed exactly; start again with --overwrite");
    const std::string held = run_files_in(dir_);
    check(held.empty(), "--resume: ", dir_, " has no committed checkpoint (", held,
          "; the run stopped before its first checkpoint); start again with --overwrite");
    fail("--resume: ", dir_, " holds no training run; drop --resume to start one");
  }
  std::string name = read_text(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  const std::optional<int64_t> step = checkpoint_step(name);
  check(step.has_value(), "--resume: ", latest, " is damaged: expected 'checkpoint-<step>', got '",
        name.substr(0, 64), "'");
  checkpoint_ = dir_ + "/" + name;
  check(fs::is_directory(checkpoint_, ec), "--resume: ", latest, " names ", name,
        ", which does not exist; start again with --overwrite");
  const std::string manifest = checkpoint_ + "/" + kManifest;
  check(fs::exists(manifest, ec), "--resume: ", checkpoint_, " has no ", kManifest);
  manifest_ = parse_manifest(manifest);
  check(manifest_.step == *step, "--resume: ", manifest, " is for step ", manifest_.step, ", but the directory is ",
        name);
  check(manifest_.trainer == trainer_, "--resume: ", dir_, " holds a ", manifest_.trainer,
        " run; it cannot be continued as a ", trainer_, " run");
  for (const char* need : {"config.json", "model.safetensors", kOptimizer})
    check(manifest_.files.count(need) == 1, "--resume: ", checkpoint_, " has no ", need, " in its manifest");
  for (const auto& [file, size] : manifest_.files) {
    const std::string path = checkpoint_ + "/" + file;
    check(fs::is_regular_file(path, ec), "--resume: ", path, " is missing");
    const auto have = int64_t(fs::file_size(path, ec));
    check(!ec && have == size, "--resume: ", path, " has ", have, " bytes, its manifest says ", size);
  }
}

std::string RunDir::checkpoint_config() const {
  check(!checkpoint_.empty(), "RunDir: no checkpoint to resume from in ", dir_);
  return read_text(checkpoint_ + "/config.json");
}

void RunDir::check_config(const std::string& config_json, const char* flags) const {
  const std::string path = checkpoint_ + "/config.json";
  nlohmann::json run, given;
  try {
    run = nlohmann::json::parse(checkpoint_config());
    given = nlohmann::json::parse(config_json);
  } catch (const nlohmann::json::exception& e) {
    fail("--resume: ", path, " is not valid JSON (", e.what(), ")");
  }
  check(run == given, "--resume: the model differs from the run's ", path, " (", json_differences(run, given),
        "); omit ", flags, " when resuming: the run's own config is used");
}

void RunDir::check_resumed(int64_t optimizer_step, uint64_t seed) const {
  check(optimizer_step == manifest_.step, "--resume: ", checkpoint_, "/", kOptimizer, " is at step ",
        optimizer_step, ", its manifest at step ", manifest_.step);
  check(seed == manifest_.seed, "--seed: ", seed, " differs from the run's seed ", manifest_.seed, " (",
        checkpoint_, "/", kManifest, "); a resumed run keeps its seed");
}

RunDir resume_run(const std::string& dir, const std::string& trainer, bool writer, const ResumeTarget& target) {
  RunDir run(dir, RunStart::kResume, trainer, writer);
  if (!target.config_json.empty()) run.check_config(target.config_json);
  int64_t step = 0;
  try {
    step = target.load(run.checkpoint_path());
  } catch (const Error& e) {
    fail("--resume: ", run.checkpoint_path(), ": ", e.what());
  }
  run.check_resumed(step, target.seed);
  run.prepare();
  return run;
}

RunDir& open_run(std::optional<RunDir>& run, const std::string& dir, RunStart start, const std::string& trainer,
                 bool writer) {
  if (!run) {
    run.emplace(dir, start, trainer, writer);
    run->prepare();
  }
  return *run;
}

void RunDir::prepare() {
  if (!writer_) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  check(!ec, "--out: cannot create ", dir_, ": ", ec.message());
  if (start_ == RunStart::kNew) return;
  const std::string committed = checkpoint_.empty() ? "" : fs::path(checkpoint_).filename().string();
  if (start_ == RunStart::kOverwrite && fs::exists(dir_ + "/" + kLatest, ec)) {
    // Uncommit first: a kill during the removals below must not leave 'latest' naming a removed checkpoint.
    remove_path(dir_ + "/" + kLatest);
    sync_path(dir_, true);
  }
  for (const std::string& name : sorted_entries(dir_)) {
    const bool stale = start_ == RunStart::kOverwrite ? is_run_file(name)
                                                      : is_temporary(name) ||
                                                            (checkpoint_step(name) && name != committed);
    if (stale) remove_path(dir_ + "/" + name);
  }
  if (start_ == RunStart::kResume) {
    for (const auto& [file, size] : manifest_.files)
      if (file != kOptimizer && file != kManifest) publish_file(checkpoint_, dir_, file);
    const std::string log = log_path();
    if (fs::exists(log, ec) && int64_t(fs::file_size(log, ec)) > manifest_.log_bytes)
      fs::resize_file(log, uintmax_t(manifest_.log_bytes), ec);
    check(!ec, "--resume: cannot cut ", log, " back to the checkpoint: ", ec.message());
  }
  sync_path(dir_, true);
}

}  // namespace attnkit
