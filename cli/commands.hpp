#pragma once
// Each CLI subcommand lives in its own cli/cmd_*.cpp and registers itself on the app here.
// Commands throw attnkit::Error for bad input; main() turns it into one line and exit code 2.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::cli {

void add_kv_plan_command(CLI::App& app);   // cmd_kv_plan.cpp
void add_inspect_command(CLI::App& app);   // cmd_inspect.cpp
void add_bench_command(CLI::App& app);     // cmd_bench.cpp
void add_bench_decode_command(CLI::App& bench);  // cmd_bench_decode.cpp (decode, roofline)
void add_bench_generate_command(CLI::App& bench);  // cmd_bench_generate.cpp
void add_bench_deformable_command(CLI::App& bench);  // cmd_bench_deformable.cpp
void add_train_command(CLI::App& app);     // cmd_train.cpp (train gpt, eval)
void add_generate_command(CLI::App& app);  // cmd_generate.cpp
void add_bert_commands(CLI::App& app);     // cmd_bert.cpp (train bert, finetune bert); after train

// `attnkit eval` for a BERT directory: masked-LM loss (+ NSP accuracy) on --data's validation
// split, or the fortune-file accuracy of a sequence classifier (cmd_bert.cpp).
void run_bert_eval(const std::string& dir, const std::vector<std::string>& data, int64_t examples, bool json);
void add_convert_gqa_command(CLI::App& app);  // cmd_convert_gqa.cpp
void add_demo_command(CLI::App& app);      // cmd_demo.cpp
void add_dataset_command(CLI::App& app);   // cmd_dataset.cpp (IDX data sets)
void add_sinks_commands(CLI::App& app);    // cmd_sinks.cpp (sink-profile, eval-stream)
void add_vision_commands(CLI::App& app);   // cmd_vision.cpp (train cnn, classify); after train
void add_train_deformable_command(CLI::App& app);  // cmd_train_deformable.cpp; after train
void add_train_vit_command(CLI::App& app);  // cmd_train_vit.cpp (train vit); after train
void add_report_command(CLI::App& app);    // cmd_report.cpp (runs python -m attnkit.report)

// `attnkit eval` for an image model: accuracy and loss on the test split of data_dir (first
// `limit` images; 0 = all) (cmd_vision.cpp).
void run_image_eval(const std::string& dir, const std::string& data_dir, int64_t limit, bool json);

}  // namespace attnkit::cli
