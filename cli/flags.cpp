// Shared flags and checks of the CLI (see flags.hpp).
#include "flags.hpp"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/ops/gemm_bf16.hpp"

namespace attnkit::cli {
namespace {

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

// s as a finite double, or nothing (trailing text, empty, NaN, infinity, overflow).
bool parse_finite(const std::string& s, double& out) {
  const char* end = s.data() + s.size();
  const auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end && std::isfinite(out);
}

std::string range_text(int64_t min, int64_t max) {
  if (max == INT64_MAX) return ">= " + std::to_string(min);
  return "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

// x with up to 4 significant digits: 0.5, 1e+06, 23.54.
std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

}  // namespace

CLI::Validator integer_in(int64_t min, int64_t max) {
  const std::string want = "must be an integer " + range_text(min, max);
  return CLI::Validator(
      [min, max, want](std::string& s) -> std::string {
        int64_t v = 0;
        const char* end = s.data() + s.size();
        const auto [p, ec] = std::from_chars(s.data(), end, v);
        if (ec == std::errc::result_out_of_range) return want + ", got " + in_quotes(s) + " (out of range)";
        if (ec != std::errc() || p != end || s.empty()) return want + ", got " + in_quotes(s);
        if (v < min || v > max) return want + ", got " + s;
        return {};
      },
      "INT " + range_text(min, max));
}

CLI::Validator number_in(double min, double max, bool open_min) {
  const std::string range = std::string(open_min ? "in (" : "in [") + number_text(min) + ", " +
                            (std::isinf(max) ? "inf)" : number_text(max) + "]");
  const std::string want = "must be a finite number " + range;
  return CLI::Validator(
      [min, max, open_min, want](std::string& s) -> std::string {
        double v = 0;
        if (!parse_finite(s, v)) return want + ", got " + in_quotes(s);
        if (v < min || (open_min && v == min) || v > max) return want + ", got " + s;
        return {};
      },
      "NUMBER " + range);
}

CLI::Validator positive_number() {
  return number_in(0, INFINITY, true);
}

CLI::Option* add_threads_flag(CLI::App& cmd, int& threads) {
  return cmd
      .add_option("--threads", threads,
                  "Threads: 0 = all cores, else 1.." + std::to_string(kMaxThreads))
      ->check(integer_in(0, kMaxThreads))
      ->capture_default_str();
}

CLI::Option* add_precision_flag(CLI::App& cmd, MatmulPrecision& precision) {
  return cmd
      .add_option_function<std::string>(
          "--precision", [&precision](const std::string& s) { precision = parse_matmul_precision(s); },
          "Linear and convolution products: f32, or bf16 mixed precision (bf16 inputs, f32 "
                  "accumulation; weights, optimizer, attention and norms stay f32; needs AVX512-BF16 or AMX; "
                  "docs/bf16.md)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            if (s != "f32" && s != "bf16") return "must be f32 or bf16, got " + in_quotes(s);
            if (s == "bf16" && !gemm_bf16_available()) return "bf16: " + gemm_bf16_unavailable_reason();
            return {};
          },
          "f32|bf16"))
      ->default_str(matmul_precision_name(precision));
}

CLI::Option* add_seed_flag(CLI::App& cmd, uint64_t& seed, const std::string& help) {
  const std::string want = "must be an integer in [0, 18446744073709551615]";
  return cmd.add_option("--seed", seed, help)
      ->check(CLI::Validator(
          [want](std::string& s) -> std::string {
            uint64_t v = 0;
            const char* end = s.data() + s.size();
            const auto [p, ec] = std::from_chars(s.data(), end, v);
            if (ec == std::errc::result_out_of_range) return want + ", got " + in_quotes(s) + " (out of range)";
            if (ec != std::errc() || p != end || s.empty()) return want + ", got " + in_quotes(s);
            return {};
          },
          "UINT64"))
      ->capture_default_str();
}

CLI::Option* add_json_flag(CLI::App& cmd, bool& json, const std::string& help) {
  return cmd.add_flag("--json", json, help);
}

CLI::Option* add_sink_tokens_flag(CLI::App& cmd, int64_t& tokens, const std::string& help) {
  add_renamed_flag(cmd, "--sink", "--sink-tokens");
  add_renamed_flag(cmd, "--sinks", "--sink-tokens");
  return cmd.add_option("--sink-tokens", tokens, help)->check(integer_in(0));
}

void add_renamed_flag(CLI::App& cmd, const std::string& old_name, const std::string& new_name) {
  cmd.add_option(
         old_name,
         [old_name, new_name](const CLI::results_t&) -> bool {
           fail(old_name, " is now ", new_name, " (see --help)");
         },
         "Renamed " + new_name)
      ->expected(0, 1)
      ->group("");  // hidden from --help
}

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : 0;
}

void check_fits_in_memory(double bytes, const std::string& flag, const std::string& what) {
  const double mem = double(physical_memory_bytes());
  const double gib = double(int64_t(1) << 30);
  check(mem <= 0 || bytes <= mem, flag, ": ", what, " would need ", number_text(bytes / gib),
        " GiB, more than this machine's ", number_text(mem / gib), " GiB of memory");
}

double gpt_kv_cache_bytes(const GptConfig& c, double tokens) {
  return tokens * 2.0 * double(c.num_hidden_layers) * double(c.num_key_value_heads) * double(c.head_dim) * 4.0;
}

void check_output_file(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  check(!path.empty(), flag, ": empty path");
  std::error_code ec;
  check(!fs::is_directory(path, ec), flag, ": ", path, " is a directory, expected a file name");
  const fs::path parent = fs::path(path).parent_path();
  const std::string folder = parent.empty() ? "." : parent.string();
  check(fs::is_directory(folder, ec), flag, ": ", path, ": folder ", folder, " does not exist");
  check(access(folder.c_str(), W_OK) == 0, flag, ": ", path, ": folder ", folder, " is not writable");
}

void require_model_dir(const std::string& dir, const std::string& flag, ModelKind kind, const char* command) {
  namespace fs = std::filesystem;
  std::error_code ec;
  check(!dir.empty(), flag, ": empty path");
  check(fs::exists(dir, ec), flag, ": ", dir, ": no such directory");
  check(fs::is_directory(dir, ec), flag, ": ", dir, " is not a directory (a model directory holds config.json and "
        "model.safetensors)");
  check(fs::exists(dir + "/config.json", ec), flag, ": ", dir, " has no config.json (not a model directory)");
  require_model_kind(dir, kind, command, flag);
}

}  // namespace attnkit::cli
