// `attnkit inspect FILE [--json]`: validates a safetensors file and lists every tensor (name,
// dtype, shape, bytes) in an aligned table, then the metadata and totals (tensor count,
// parameters, bytes). --json prints the same as one JSON object. A bad file is an attnkit::Error,
// which main() reports as one line and exit code 2.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "attnkit/core/file_io.hpp"
#include "attnkit/io/safetensors.hpp"
#include "attnkit/models/model_registry.hpp"
#include "commands.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Control bytes escaped as \xNN so a hostile name cannot move the cursor or break the table.
std::string printable(std::string_view s) {
  std::string out;
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

// Display width of UTF-8 text, counted in code points (good enough for names and dtypes).
size_t width(std::string_view s) {
  return size_t(std::count_if(s.begin(), s.end(),
                              [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string pad(const std::string& s, size_t w, bool right) {
  const std::string fill(w > width(s) ? w - width(s) : 0, ' ');
  return right ? fill + s : s + fill;
}

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

struct Totals {
  uint64_t parameters = 0, bytes = 0;  // cannot overflow: each tensor's bytes lie in the file
};

Totals totals_of(const SafetensorsFile& f) {
  Totals t;
  for (const TensorInfo& info : f.tensors()) {
    t.parameters += uint64_t(info.numel());
    t.bytes += info.nbytes();
  }
  return t;
}

void print_table(const SafetensorsFile& f) {
  const std::vector<std::string> head = {"name", "dtype", "shape", "bytes"};
  std::vector<std::vector<std::string>> rows;
  for (const TensorInfo& info : f.tensors())
    rows.push_back({printable(info.name), std::string(dtype_name(info.dtype)), shape_text(info.shape),
                    std::to_string(info.nbytes())});
  std::vector<size_t> w(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    w[c] = width(head[c]);
    for (const auto& r : rows) w[c] = std::max(w[c], width(r[c]));
  }
  auto print_row = [&](const std::vector<std::string>& r) {
    std::cout << pad(r[0], w[0], false) << "  " << pad(r[1], w[1], false) << "  "
              << pad(r[2], w[2], false) << "  " << pad(r[3], w[3], true) << "\n";
  };
  std::cout << printable(f.source()) << ": header " << f.header_size() << " bytes, data "
            << f.data_size() << " bytes\n\n";
  print_row(head);
  for (const auto& r : rows) print_row(r);
  if (!f.metadata().empty()) {
    std::cout << "\nmetadata:\n";
    for (const auto& [k, v] : f.metadata()) std::cout << "  " << printable(k) << ": " << printable(v) << "\n";
  }
  const Totals t = totals_of(f);
  std::cout << "\ntotal: " << f.tensors().size() << " tensors, " << t.parameters << " parameters, "
            << t.bytes << " bytes (" << human_bytes(t.bytes) << ")\n";
}

void print_json(const SafetensorsFile& f, const ModelType* type) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorInfo& info : f.tensors())
    tensors.push_back({{"name", info.name},
                       {"dtype", std::string(dtype_name(info.dtype))},
                       {"shape", info.shape},
                       {"bytes", info.nbytes()},
                       {"data_offsets", {info.begin, info.end}}});
  const Totals t = totals_of(f);
  nlohmann::json out = {
      {"file", f.source()},
      {"header_bytes", f.header_size()},
      {"tensors", tensors},
      {"metadata", f.metadata()},
      {"totals", {{"tensors", f.tensors().size()}, {"parameters", t.parameters}, {"bytes", t.bytes}}},
  };
  if (type) out["model"] = {{"model_type", type->model_type}, {"kind", model_kind_name(type->kind)}};
  // The path is not validated as UTF-8, so replace rather than throw on odd bytes.
  std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto opts = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Validate a safetensors file (or a model directory's) and list its tensors, metadata and totals");
  cmd->add_option("file", opts->path, "safetensors file, or a model directory (config.json + model.safetensors)")
      ->required();
  add_json_flag(*cmd, opts->json, "print one JSON object instead of a table");
  cmd->callback([opts] {
    const bool dir = std::filesystem::is_directory(opts->path);
    if (!dir) check_readable_file(opts->path, "inspect");
    const ModelType* type = dir ? &model_type_of_dir(opts->path) : nullptr;
    const SafetensorsFile f(dir ? opts->path + "/model.safetensors" : opts->path);
    if (opts->json) {
      print_json(f, type);
    } else {
      if (type) std::cout << "model_type " << type->model_type << " (" << model_kind_name(type->kind) << " model)\n";
      print_table(f);
    }
    std::cout.flush();
  });
}

}  // namespace attnkit::cli
