// `attnkit report --out DIR [--quick | --tiny] [--sink-model RUN] [--gate-model RUN]`: runs the
// experiments of every issue at sizes that fit this machine and writes DIR/index.html with PNG
// figures and tables (--sink-model / --gate-model: profile existing trained runs in the sink and
// gate sections instead of training models there). The orchestration and
// the figures are the Python module attnkit.report (matplotlib); this command runs it with
// Debian's /usr/bin/python3 and the module next to this binary (BUILD/python), passing its own
// path so every experiment runs this same attnkit (after checking that the interpreter can import
// the module).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/core/error.hpp"
#include "commands.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

struct ReportFlags {
  std::string out, python = "/usr/bin/python3", sink_model, gate_model;
  bool quick = false, tiny = false;
};

// Runs args (args[0] a program's path) and returns its exit status (127 if it could not be run,
// -1 if it was killed) and its stdout and stderr together, at most the first 64 KiB.
std::pair<int, std::string> run_captured(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  check(pipe(fds) == 0, "report: pipe: ", std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    fail("report: cannot start ", args[0], ": ", std::strerror(err));
  }
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (out.size() < (64 << 10)) out.append(buf, size_t(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) check(errno == EINTR, "report: waitpid: ", std::strerror(errno));
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Checks that `python` runs and can import the report module (numpy, matplotlib): it must print a
// token, so a program that exits 0 without running Python (e.g. /bin/true) fails here.
void check_interpreter(const std::string& python) {
  constexpr const char* kToken = "attnkit-report-ready";
  const auto [status, out] =
      run_captured({python, "-c", std::string("import attnkit.report; print('") + kToken + "')"});
  if (status == 0 && out == std::string(kToken) + "\n") return;
  std::string last = out.substr(0, out.find_last_not_of("\n") + 1);
  if (const size_t nl = last.rfind('\n'); nl != std::string::npos) last = last.substr(nl + 1);
  fail("report: ", python, " cannot run the report module (it needs Python 3 with numpy and matplotlib)",
       last.empty() ? std::string() : ": " + last);
}

[[noreturn]] void run_report(const ReportFlags& f) {
  namespace fs = std::filesystem;
  std::error_code ec;
  check(!f.out.empty(), "--out: empty path");
  check(!fs::exists(f.out, ec) || fs::is_directory(f.out, ec), "--out: ", f.out, " exists and is not a directory");
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  check(!ec, "report: cannot find this executable's path: ", ec.message());
  const fs::path module_dir = self.parent_path() / "python";
  check(fs::exists(module_dir / "attnkit" / "report.py"), "report: the Python module is not next to this binary (",
        (module_dir / "attnkit" / "report.py").string(), " is missing; build with ATTNKIT_PYTHON=ON)");
  check(fs::exists(f.python), "report: ", f.python, " not found (Debian's python3 with matplotlib is needed)");
  check(access(f.python.c_str(), X_OK) == 0 && !fs::is_directory(f.python, ec), "report: ", f.python,
        " is not an executable file");
  const char* old = std::getenv("PYTHONPATH");
  const std::string path = module_dir.string() + (old && *old ? ":" + std::string(old) : "");
  setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<std::string> args = {f.python, "-m", "attnkit.report", "--out", f.out, "--cli", self.string()};
  if (f.quick) args.push_back("--quick");
  if (f.tiny) args.push_back("--tiny");
  for (const auto& [flag, dir] : {std::pair{"--sink-model", &f.sink_model}, std::pair{"--gate-model", &f.gate_model}}) {
    if (dir->empty()) continue;
    require_model_dir(*dir, flag, ModelKind::kGpt, "report");  // a GPT, checked before any section runs
    args.insert(args.end(), {flag, *dir});
  }
  check_interpreter(f.python);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  execv(f.python.c_str(), argv.data());  // the module's exit status and messages are the command's
  fail("report: cannot run ", f.python, ": ", std::strerror(errno));
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto f = std::make_shared<ReportFlags>();
  auto* r = app.add_subcommand(
      "report",
      "Run the experiments of every issue at sizes that fit this machine and write DIR/index.html with PNG "
      "figures and tables (each states its command and machine). Default: full sizes (the longest; the page "
      "gives the time taken); --quick: under 15 minutes; --tiny: seconds (pipeline check, numbers not meaningful)");
  r->add_option("--out", f->out, "Output directory (index.html, PNGs, commands.log, work/)")->required();
  auto* q = r->add_flag("--quick", f->quick, "Small sizes: under 15 minutes on 2 cores");
  r->add_flag("--tiny", f->tiny, "Tiny sizes: seconds; for tests")->excludes(q);
  r->add_option("--sink-model", f->sink_model,
                 "Existing GPT run directory for the sink, streaming and GQA-conversion sections (default: train "
                 "one at the mode's size)");
  r->add_option("--gate-model", f->gate_model,
                 "Existing gated GPT run directory for the gate section (default: train one at the mode's size)");
  r->add_option("--python", f->python, "Python interpreter with numpy and matplotlib")->capture_default_str();
  r->callback([f] { run_report(*f); });
}

}  // namespace attnkit::cli
