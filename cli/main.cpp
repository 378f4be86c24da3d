// attnkit command-line tool: one subcommand per cli/cmd_*.cpp. Every failure ends with one line
// `attnkit: error: ...` on stderr and exit code 2 (help and --version exit 0).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>
#include <string>

#include "attnkit/core/error.hpp"
#include "cli_data.hpp"
#include "commands.hpp"

namespace {

// Prints `attnkit: error: MESSAGE` as one line (line breaks inside MESSAGE become "; ").
int report_error(std::string message) {
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  std::string line;
  for (char c : message) {
    if (c == '\n') line += "; ";
    else if (c != '\r') line += c;
  }
  std::fprintf(stderr, "attnkit: error: %s\n", line.empty() ? "unknown failure" : line.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnkit: exact attention (FlashAttention-style), KV caches and transformer models on the CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "attnkit 0.1.0");
  attnkit::cli::add_kv_plan_command(app);
  attnkit::cli::add_inspect_command(app);
  attnkit::cli::add_bench_command(app);
  attnkit::cli::add_train_command(app);
  attnkit::cli::add_bert_commands(app);
  attnkit::cli::add_vision_commands(app);
  attnkit::cli::add_train_deformable_command(app);
  attnkit::cli::add_train_vit_command(app);
  attnkit::cli::add_generate_command(app);
  attnkit::cli::add_convert_gqa_command(app);
  attnkit::cli::add_demo_command(app);
  attnkit::cli::add_dataset_command(app);
  attnkit::cli::add_sinks_commands(app);
  attnkit::cli::add_report_command(app);
  try {
    // An unknown (sub)command where one is required: CLI11 would only say "A subcommand is
    // required". Walk the command words as long as each level needs one.
    const CLI::App* level = &app;
    std::string path = "attnkit";
    for (int i = 1; i < argc && argv[i][0] != '-' && level->get_require_subcommand_min() > 0; ++i) {
      std::string names;
      const CLI::App* next = nullptr;
      for (const CLI::App* c : level->get_subcommands({})) {
        names += (names.empty() ? "" : ", ") + c->get_name();
        if (c->get_name() == argv[i]) next = c;
      }
      if (next == nullptr)
        return report_error("unknown command '" + std::string(argv[i]) + "' for " + path + " (commands: " + names +
                            ")");
      path += " " + next->get_name();
      level = next;
    }
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report_error(std::string(e.what()) + " (see --help)");
  } catch (const attnkit::cli::ReportedError&) {
    return 2;  // its one line is already on stderr
  } catch (const attnkit::Error& e) {
    return report_error(e.what());
  } catch (const std::bad_alloc&) {
    return report_error("out of memory (a size flag of this command may be too large)");
  } catch (const std::length_error&) {
    return report_error("a requested size is too large to allocate (check the size flags)");
  } catch (const std::filesystem::filesystem_error& e) {
    return report_error(e.path1().string() + ": " + e.code().message());
  } catch (const std::logic_error& e) {
    return report_error(std::string("internal error: ") + e.what() + " (please report this command line)");
  } catch (const std::exception& e) {
    return report_error(e.what());
  } catch (...) {
    return report_error("unknown failure (please report this command line)");
  }
  return 0;
}
