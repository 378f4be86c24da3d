#pragma once
// Flags every command shares (--threads, --seed, --json), checks of numeric flags, memory
// estimates and output paths, defined once so that every refusal names its flag:
// `attnkit: error: --threads: must be an integer in [0, 1024], got '-3'`.
// The checks are CLI11 validators: they read the flag's text before conversion, so a negative
// --seed is refused instead of wrapping, and "nan" or "1e400" never reach a command.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "attnkit/core/parallel.hpp"
#include "attnkit/models/gpt_config.hpp"
#include "attnkit/models/model_registry.hpp"
#include "attnkit/ops/matmul_precision.hpp"

namespace attnkit::cli {

// --threads N: 0 = all cores, else N threads (at most attnkit::kMaxThreads, core/parallel.hpp: a
// fixed bound, not a multiple of this machine's cores, so a command line means the same anywhere).
CLI::Option* add_threads_flag(CLI::App& cmd, int& threads);
// --seed N: an integer in [0, 2^64 - 1]; negative values are refused (never wrapped).
CLI::Option* add_seed_flag(CLI::App& cmd, uint64_t& seed, const std::string& help);
// --json: print one JSON object (or array) on stdout instead of text.
CLI::Option* add_json_flag(CLI::App& cmd, bool& json, const std::string& help);
// --precision f32|bf16: the training's linear and convolution products (ops/matmul_precision.hpp);
// bf16 is refused at parse time where this process cannot run it (gemm_bf16_available).
CLI::Option* add_precision_flag(CLI::App& cmd, MatmulPrecision& precision);

// --sink-tokens N: StreamingLLM's sink tokens, the first N tokens a KV cache keeps for ever
// (kv/kv_cache.hpp; not the softmax's sink logits). The old spellings --sink and --sinks fail
// with one line naming --sink-tokens.
CLI::Option* add_sink_tokens_flag(CLI::App& cmd, int64_t& tokens, const std::string& help);
// A flag's removed spelling: `old_name` (given with or without a value) fails with
// "OLD is now NEW", so an old command line stops instead of meaning something else.
void add_renamed_flag(CLI::App& cmd, const std::string& old_name, const std::string& new_name);

// Validator: an integer (decimal, no exponent) in [min, max].
CLI::Validator integer_in(int64_t min, int64_t max = INT64_MAX);
// Validator: a finite number in [min, max] (min excluded if `open_min`).
CLI::Validator number_in(double min, double max, bool open_min = false);
// Validator: a finite number > 0.
CLI::Validator positive_number();

// Physical memory of this machine in bytes (sysconf; 0 if unknown).
int64_t physical_memory_bytes();
// Throws attnkit::Error naming `flag` if `bytes` (what the flag's value makes the command
// allocate) exceeds this machine's physical memory; `what` says what would be allocated.
void check_fits_in_memory(double bytes, const std::string& flag, const std::string& what);

// Bytes of a float32 KV cache holding `tokens` tokens of every layer of a GPT (an upper bound for
// the narrower storage types), as a double so that huge flag values cannot overflow.
double gpt_kv_cache_bytes(const GptConfig& config, double tokens);

// Throws attnkit::Error naming `flag` unless `path` can be created as a file: its folder exists
// and is writable, and `path` is not an existing directory.
void check_output_file(const std::string& path, const std::string& flag);

// Checks that DIR (given by `flag`) is a model directory whose config.json's model_type is of
// `kind` (models/model_registry.hpp); throws attnkit::Error naming the flag, the directory and,
// for the wrong kind, "`COMMAND` needs a GPT model; DIR holds a bert model".
void require_model_dir(const std::string& dir, const std::string& flag, ModelKind kind, const char* command);

}  // namespace attnkit::cli
