// Shared CLI helpers: matplotlib figures.
#include "cli_data.hpp"

#include <cstdio>
#include <filesystem>
#include <sys/wait.h>

#include "attnkit/core/error.hpp"
#include "attnkit/core/file_io.hpp"

namespace attnkit::cli {

namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Prepended to every script: an uncaught exception prints one line naming the flag (no
// traceback) and exits with kScriptFailed.
constexpr int kScriptFailed = 3;
std::string error_hook(const std::string& flag) {
  return "import sys, os\n"
         "def _attnkit_error(kind, value, tb):\n"
         "    text = (str(value).splitlines() or [''])[0] or kind.__name__\n"
         "    sys.stderr.write('attnkit: error: " + flag + ": %s: %s\\n' % (kind.__name__, text))\n"
         "    sys.stderr.flush()\n"
         "    os._exit(" + std::to_string(kScriptFailed) + ")\n"
         "sys.excepthook = _attnkit_error\n";
}

}  // namespace

void run_python(const char* script, const std::vector<std::string>& args, const std::string& flag) {
  const std::string python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  std::string cmd = python + " -";
  for (const auto& a : args) cmd += " " + shell_quote(a);
  FILE* p = popen(cmd.c_str(), "w");
  check(p != nullptr, flag, ": cannot run ", python);
  std::fputs(error_hook(flag).c_str(), p);
  std::fputs(script, p);
  const int status = pclose(p);
  if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == kScriptFailed)
    throw ReportedError(flag + ": the matplotlib script failed");
  check(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, flag, ": ", python,
        " failed (python3-matplotlib installed? see scripts/setup)");
}

}  // namespace attnkit::cli
