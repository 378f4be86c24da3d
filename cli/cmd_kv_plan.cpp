// `attnkit kv-plan`: KV-cache cost of a model shape (M_tok = 2·L·Hkv·D·b) and of its MHA and MQA
// variants, as a table in human units or, with --json, one JSON object of exact integers.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/kv/kv_plan.hpp"
#include "commands.hpp"
#include "flags.hpp"

namespace attnkit::cli {
namespace {

struct KVPlanArgs {
  std::string preset;
  // Integers are parsed here rather than by CLI11, which clamps out-of-range values silently.
  std::string layers, heads, kv_heads, head_dim, context;
  std::string dtype = "f16";
  std::string batch = "1", tp = "1";
  double bandwidth = kDefaultKVBandwidth;
  std::string memory = "80e9";
  bool json = false;
  // The options the user typed, so explicit values can override the preset's.
  CLI::Option *o_layers, *o_heads, *o_kv_heads, *o_head_dim, *o_dtype, *o_context;
};

// A signed 64-bit integer, or an error naming the option.
int64_t parse_int(const std::string& s, std::string_view name) {
  int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  check(ec != std::errc::result_out_of_range, "kv_plan: ", name, " does not fit in 64 bits: ", s);
  check(ec == std::errc() && p == end, "kv_plan: ", name, " must be an integer, got '", s, "'");
  return v;
}

// A byte count written as an integer ("80000000000") or in exponent form ("80e9").
int64_t parse_bytes(const std::string& s, std::string_view name) {
  const char* end = s.data() + s.size();
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec == std::errc() && p == end) return v;
  double d = 0;
  auto [pd, ecd] = std::from_chars(s.data(), end, d);
  check(ecd == std::errc() && pd == end && std::isfinite(d) && d == std::floor(d),
        "kv_plan: ", name, " must be a whole number of bytes (e.g. 80e9), got '", s, "'");
  check(std::fabs(d) < 9.2e18, "kv_plan: ", name, " must be below 9.2e18 bytes, got '", s, "'");
  return int64_t(d);
}

// `v` with 3 significant digits and no exponent: 2.5, 320, 85.9, 1.34.
std::string sig3(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, v >= 99.95 ? "%.0f" : v >= 9.995 ? "%.1f" : "%.2f", v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

// Binary units (KiB, MiB, ...), as per-token sizes are quoted.
std::string binary_bytes(int64_t b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  return sig3(v) + " " + units[u];
}

// Decimal units (kB, MB, GB, ...), as cache and memory sizes are quoted.
std::string decimal(double v, const char* suffix) {
  static const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int u = 0;
  while (v >= 1000 && u < 6) v /= 1000, ++u;
  return sig3(v) + " " + prefixes[u] + suffix;
}

std::string duration(double s) {
  if (s >= 1) return sig3(s) + " s";
  if (s >= 1e-3) return sig3(s * 1e3) + " ms";
  if (s >= 1e-6) return sig3(s * 1e6) + " us";
  return sig3(s * 1e9) + " ns";
}

KVPlanRequest to_request(const KVPlanArgs& a) {
  KVPlanRequest r;
  r.preset = a.preset;
  if (*a.o_layers) r.layers = parse_int(a.layers, "layers");
  if (*a.o_heads) r.heads = parse_int(a.heads, "heads");
  if (*a.o_kv_heads) r.kv_heads = parse_int(a.kv_heads, "kv_heads");
  if (*a.o_head_dim) r.head_dim = parse_int(a.head_dim, "head_dim");
  if (*a.o_context) r.context = parse_int(a.context, "context");
  if (*a.o_dtype) {
    r.dtype = parse_kv_dtype(a.dtype);
    check(r.dtype.has_value(), "kv_plan: dtype must be one of f32, f16, bf16, int8, fp8, got '", a.dtype, "'");
  }
  r.batch = parse_int(a.batch, "batch");
  r.tp = parse_int(a.tp, "tp");
  r.bandwidth = a.bandwidth;
  r.memory = parse_bytes(a.memory, "memory");
  return r;
}

nlohmann::json to_json(const std::vector<KVPlanField>& fields) {
  nlohmann::json j = nlohmann::json::object();
  for (const KVPlanField& f : fields) {
    std::visit([&](const auto& v) { j[std::string(f.key)] = v; }, f.value);
  }
  return j;
}

void print_json(const KVPlanArgs& a, const KVPlanInputs& in, const KVPlanVariants& v) {
  nlohmann::json j = nlohmann::json::object();
  j["preset"] = a.preset.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.preset);
  j.update(to_json(kv_plan_fields(in)));
  j.update(to_json(kv_plan_fields(v.given)));
  j["mha"] = to_json(kv_plan_fields(v.mha));
  j["mqa"] = to_json(kv_plan_fields(v.mqa));
  std::printf("%s\n", j.dump(2).c_str());
}

// One table line: a label and the MHA, given, MQA cells.
void line(const std::string& label, const std::string& mha, const std::string& given, const std::string& mqa) {
  std::printf("%-34s %12s %12s %12s\n", label.c_str(), mha.c_str(), given.c_str(), mqa.c_str());
}

template <class F>
void row(const std::string& label, const KVPlanVariants& v, F cell) {
  line(label, cell(v.mha), cell(v.given), cell(v.mqa));
}

void print_table(const KVPlanArgs& a, const KVPlanInputs& in, const KVPlanVariants& v) {
  const KVShape& s = in.shape;
  const KVPlanOptions& o = in.options;
  const std::string dtype(kv_dtype_name(s.dtype));
  std::printf("KV cache plan for %s%sL=%lld layers, H=%lld query heads, D=%lld, %s (b=%lld B)\n",
              a.preset.c_str(), a.preset.empty() ? "" : ": ", (long long)s.layers,
              (long long)s.heads, (long long)s.head_dim, dtype.c_str(),
              (long long)kv_dtype_bytes(s.dtype));
  std::printf("M_tok = 2*L*Hkv*D*b%s; context %lld tokens, batch %lld, tp %lld\n\n",
              s.dtype == KVDType::int8 ? " + 2*L*Hkv*4 (int8 scales)" : "", (long long)o.context,
              (long long)o.batch, (long long)o.tp);
  const std::string bw = decimal(o.bandwidth, "B/s"), mem = decimal(double(o.memory), "B");
  const auto i = [](int64_t x) { return std::to_string(x); };
  line("", "MHA", "given", "MQA");
  row("KV heads (Hkv)", v, [&](const KVPlanRow& r) { return i(r.kv_heads); });
  row("bytes per token", v, [&](const KVPlanRow& r) { return binary_bytes(r.bytes_per_token); });
  if (s.dtype == KVDType::int8) {
    row("  of which int8 scales", v, [&](const KVPlanRow& r) { return binary_bytes(r.scale_bytes_per_token); });
  }
  row("cache per sequence", v, [&](const KVPlanRow& r) { return decimal(double(r.bytes_per_sequence), "B"); });
  row("cache for the batch", v, [&](const KVPlanRow& r) { return decimal(double(r.bytes_batch), "B"); });
  if (o.tp > 1) {
    row("KV heads per shard", v, [&](const KVPlanRow& r) { return i(r.kv_heads_per_shard); });
    row("replication of each KV head", v, [&](const KVPlanRow& r) { return i(r.replication); });
    row("per shard: bytes per token", v, [&](const KVPlanRow& r) { return binary_bytes(r.shard_bytes_per_token); });
    row("per shard: cache per sequence", v, [&](const KVPlanRow& r) { return decimal(double(r.shard_bytes_per_sequence), "B"); });
    row("per shard: cache for the batch", v, [&](const KVPlanRow& r) { return decimal(double(r.shard_bytes_batch), "B"); });
    row("all shards: cache for the batch", v, [&](const KVPlanRow& r) { return decimal(double(r.total_bytes_batch), "B"); });
  }
  row("read once per token @ " + bw, v, [&](const KVPlanRow& r) { return duration(r.read_seconds); });
  row("sequences in " + mem + (o.tp > 1 ? " per device" : ""), v,
      [&](const KVPlanRow& r) { return i(r.sequences_in_budget); });
  std::printf("\nread time = cache bytes / bandwidth: the memory-traffic lower bound per decoded token"
              " (weights not counted)\n");
  if (auto p = kv_preset(a.preset)) std::printf("%s: %s\n", a.preset.c_str(), std::string(p->note).c_str());
}

void run(const KVPlanArgs& a) {
  const KVPlanInputs in = resolve(to_request(a));
  const KVPlanVariants v = kv_plan_variants(in.shape, in.options);
  if (a.json) {
    print_json(a, in, v);
  } else {
    print_table(a, in, v);
  }
}

std::string presets_help() {
  std::string s;
  for (const KVPreset& p : kv_presets()) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %-13s L=%lld H=%lld Hkv=%lld D=%lld %s, context %lld\n",
                  std::string(p.name).c_str(), (long long)p.shape.layers, (long long)p.shape.heads,
                  (long long)p.shape.kv_heads, (long long)p.shape.head_dim,
                  std::string(kv_dtype_name(p.shape.dtype)).c_str(), (long long)p.context);
    s += buf;
  }
  return s;
}

}  // namespace

void add_kv_plan_command(CLI::App& app) {
  auto a = std::make_shared<KVPlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "kv-plan",
      "KV-cache memory plan: bytes per token M_tok = 2*L*Hkv*D*b (b = bytes per element), per "
      "sequence and batch, decode read time, sequences that fit, tensor-parallel shards; for the "
      "given shape and its MHA (Hkv=H) and MQA (Hkv=1) variants");
  cmd->add_option("--preset", a->preset,
                  "Public model shape (explicit options override it):\n" + presets_help())
      ->type_name("NAME");
  a->o_layers = cmd->add_option("--layers", a->layers, "L, decoder layers")->type_name("INT");
  a->o_heads = cmd->add_option("--heads", a->heads, "H, query heads")->type_name("INT");
  a->o_kv_heads = cmd->add_option("--kv-heads", a->kv_heads,
                                  "Hkv, key/value heads (H % Hkv == 0; default H, i.e. MHA)")
                      ->type_name("INT");
  a->o_head_dim = cmd->add_option("--head-dim", a->head_dim, "D, dimension of one head")->type_name("INT");
  a->o_dtype = cmd->add_option("--dtype", a->dtype,
                               "Cache storage {f32,f16,bf16,int8,fp8} (default f16). int8 adds a "
                               "float32 scale per token per KV head for K and for V: 2*L*Hkv*4 bytes "
                               "per token; fp8 is 1 byte with a per-tensor scale")
                   ->type_name("DTYPE");
  a->o_context = cmd->add_option("--context", a->context, "S, tokens per sequence (default: the preset's)")
                     ->type_name("INT");
  cmd->add_option("--batch", a->batch, "B, sequences decoded together")->type_name("INT")->capture_default_str();
  cmd->add_option("--bandwidth", a->bandwidth,
                  "Memory bandwidth per device, bytes/s (default 3.35e12: H100 SXM HBM3)");
  cmd->add_option("--tp", a->tp,
                  "P, tensor-parallel shards; Hkv % P == 0, or P % Hkv == 0 with each KV head "
                  "replicated P/Hkv times")
      ->type_name("INT")
      ->capture_default_str();
  cmd->add_option("--memory", a->memory,
                  "KV-cache budget per device in bytes, e.g. 80e9 (default 80e9: one 80 GB GPU, "
                  "weights not subtracted)")
      ->type_name("BYTES");
  add_json_flag(*cmd, a->json, "Print one JSON object of exact integers instead of the table");
  cmd->footer(
      "Sizes: per-token in KiB/MiB (binary), caches and budget in GB (decimal). With --tp P, the "
      "read time and the sequences that fit use one shard's cache (shards work in parallel).\n"
      "--json keys: preset (or null), layers, heads, kv_heads, head_dim, dtype, bytes_per_element, "
      "context, batch, tp, bandwidth (B/s), memory (B); for the given shape: bytes_per_token, "
      "scale_bytes_per_token (int8 scales, included in bytes_per_token), bytes_per_sequence, "
      "bytes_batch, kv_heads_per_shard, replication, shard_bytes_per_token, "
      "shard_bytes_per_sequence, shard_bytes_batch, total_bytes_batch (all shards), read_seconds "
      "(shard_bytes_batch / bandwidth), sequences_in_budget (memory / shard_bytes_per_sequence); "
      "\"mha\" and \"mqa\": objects with the same row keys (and kv_heads) for Hkv = H and Hkv = 1.\n");
  cmd->callback([a] { run(*a); });
}

}  // namespace attnkit::cli
