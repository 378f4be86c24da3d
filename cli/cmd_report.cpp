// `attnkit report --out DIR [--quick | --tiny] [--sink-model RUN] [--gate-model RUN]`: runs the
// experiments of every issue at sizes that fit this machine and writes DIR/index.html with PNG
// figures and tables (--sink-model / --gate-model: profile existing trained runs in the sink and
// gate sections instead of training models there). The orchestration and
// the figures are the Python module attnkit.report (matplotlib); this command runs it with
// Debian's /usr/bin/python3 and the module next to this binary (BUILD/python), passing its own
// path so every experiment runs this same attnkit.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
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
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(f.python.c_str(), argv.data());
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
