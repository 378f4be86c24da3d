// attnkit command-line tool: one subcommand per cli/cmd_*.cpp.
#include <cstdio>
#include <exception>

#include "attnkit/core/error.hpp"
#include "commands.hpp"

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
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "attnkit: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnkit: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
