// `attnkit report --out DIR [--quick | --tiny] [--sink-model RUN] [--gate-model RUN]`: runs the
// experiments of every issue at sizes that fit this machine and writes DIR/index.html with PNG
// figures and tables (--sink-model / --gate-model: profile existing trained runs in the sink and
// gate sections instead of training models there). The orchestration and
// the figures are the Python module attnkit.report (matplotlib); this command runs it with
// Debian's /usr/bin/python3 and the module next to this binary (BUILD/python), passing its own
// path so every experiment runs this same attnkit, and fails unless the interpreter exits 0 and
// wrote DIR/index.html.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/core/error.hpp"
#include "cli_data.hpp"
#include "commands.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

struct ReportFlags {
  std::string out, python = "/usr/bin/python3", sink_model, gate_model;
  bool quick = false, tiny = false;
};

struct ChildResult {
  int status = 0;              // exit status; 128 + the signal's number for a child killed by one
  bool wrote_stderr = false;   // whether the child (or its children) wrote to stderr
};

// Runs args (args[0] the interpreter's path) as a child process, passing its stderr through, and
// returns how it ended. A failed exec is reported through a close-on-exec pipe and thrown here.
ChildResult run_child(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int exec_fds[2], err_fds[2];
  check(pipe2(exec_fds, O_CLOEXEC) == 0 && pipe(err_fds) == 0, "report: pipe: ", std::strerror(errno));
  const pid_t pid = fork();
  check(pid >= 0, "report: cannot start ", args[0], ": ", std::strerror(errno));
  if (pid == 0) {
    close(exec_fds[0]);
    close(err_fds[0]);
    dup2(err_fds[1], STDERR_FILENO);
    close(err_fds[1]);
    execv(argv[0], argv.data());
    const int err = errno;
    (void)!write(exec_fds[1], &err, sizeof err);
    _exit(127);
  }
  close(exec_fds[1]);
  close(err_fds[1]);
  int exec_errno = 0;
  ssize_t got;
  while ((got = read(exec_fds[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close(exec_fds[0]);
  ChildResult r;
  char buf[4096];
  for (ssize_t n; (n = read(err_fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    r.wrote_stderr = true;
    (void)!write(STDERR_FILENO, buf, size_t(n));
  }
  close(err_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) check(errno == EINTR, "report: waitpid: ", std::strerror(errno));
  check(got != ssize_t(sizeof exec_errno), "report: cannot run ", args[0], ": ", std::strerror(exec_errno));
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

void run_report(const ReportFlags& f) {
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
  const fs::path page = fs::path(f.out) / "index.html";
  const auto started = fs::file_time_type::clock::now();
  std::fflush(nullptr);
  const ChildResult r = run_child(std::move(args));
  // The report module states its own failures in one line; only a silent failure is named here.
  if (r.status != 0 && r.wrote_stderr) throw ReportedError("report failed");
  check(r.status == 0, "report: ", f.python, " -m attnkit.report exited with status ", r.status);
  // An interpreter that exits 0 without running the module (e.g. --python /bin/true) wrote no page.
  check(fs::exists(page, ec) && fs::last_write_time(page, ec) >= started, "report: ", f.python,
        " exited with status 0 but did not write ", page.string(),
        " (is it a Python with numpy and matplotlib?)");
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
