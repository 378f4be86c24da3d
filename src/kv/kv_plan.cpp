// KV-cache memory planner: M_tok = 2·L·Hkv·D·b (+ int8 scales), per sequence, per batch, per
// tensor-parallel shard, read time at a bandwidth, concurrency under a budget. See kv_plan.hpp.
#include "attnkit/kv/kv_plan.hpp"

#include <array>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

constexpr int64_t kScaleBytes = 4;   // one float32 scale per token per KV head, for K and for V

// a · b; false if it does not fit in int64.
bool mul(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

// Bytes per token for `kv_heads` heads of `shape`: 2·L·kv_heads·(D·b + int8 scale bytes).
int64_t bytes_per_token_for(const KVShape& s, int64_t kv_heads) {
  const bool scales = s.dtype == KVDType::int8;
  int64_t per_head = 0, k_and_v = 0, r = 0;
  const bool ok = mul(s.head_dim, kv_dtype_bytes(s.dtype), per_head) &&
                  !__builtin_add_overflow(per_head, scales ? kScaleBytes : 0, &per_head) &&
                  mul(2, s.layers, k_and_v) && mul(k_and_v, kv_heads, k_and_v) &&
                  mul(k_and_v, per_head, r);
  check(ok, "kv_plan: bytes per token 2*layers*kv_heads*head_dim*b overflows 64 bits (layers=",
        s.layers, ", kv_heads=", kv_heads, ", head_dim=", s.head_dim, ", b=", kv_dtype_bytes(s.dtype), ")");
  return r;
}

// bytes · count for an option `name` (context, batch, tp), or an error naming that option.
int64_t times(int64_t bytes, int64_t count, std::string_view what, std::string_view name) {
  int64_t r = 0;
  check(mul(bytes, count, r), "kv_plan: ", what, " overflows 64 bits (", bytes, " bytes * ", name,
        " ", count, "); reduce ", name);
  return r;
}

void check_positive(int64_t v, std::string_view name) {
  check(v >= 1, "kv_plan: ", name, " must be >= 1, got ", v);
}

// KV heads each shard holds, and how many shards hold each KV head, for Hkv heads over P shards.
std::pair<int64_t, int64_t> shard_kv_heads(int64_t kv_heads, int64_t tp) {
  if (kv_heads >= tp) {
    check(kv_heads % tp == 0, "kv_plan: kv_heads (", kv_heads, ") must be divisible by tp (", tp,
          ") when tp <= kv_heads");
    return {kv_heads / tp, 1};
  }
  check(tp % kv_heads == 0, "kv_plan: tp (", tp, ") must be a multiple of kv_heads (", kv_heads,
        ") when tp > kv_heads, so each KV head is replicated on a whole number of shards");
  return {1, tp / kv_heads};
}

constexpr std::array<KVPreset, 4> kPresets{{
    {"llama3-70b", {80, 64, 8, 128, KVDType::f16}, 32768,
     "Meta Llama 3 / 3.1 70B (hidden 8192); 32768 is a planning context (3: 8192, 3.1: 131072)"},
    {"llama3-8b", {32, 32, 8, 128, KVDType::f16}, 32768,
     "Meta Llama 3 / 3.1 8B (hidden 4096); 32768 is a planning context (3: 8192, 3.1: 131072)"},
    {"mistral-7b", {32, 32, 8, 128, KVDType::f16}, 32768,
     "Mistral 7B v0.2/v0.3 (hidden 4096, 32k context, no sliding window)"},
    {"gpt-oss-120b", {36, 64, 8, 64, KVDType::f16}, 131072,
     "OpenAI gpt-oss-120b; half its layers use a 128-token sliding window, so a dense plan "
     "overestimates its cache about 2x"},
}};

}  // namespace

int64_t kv_dtype_bytes(KVDType t) {
  switch (t) {
    case KVDType::f32: return 4;
    case KVDType::f16: return 2;
    case KVDType::bf16: return 2;
    case KVDType::int8: return 1;
    case KVDType::fp8: return 1;
  }
  fail("kv_plan: dtype has invalid value ", int(t));
}

std::string_view kv_dtype_name(KVDType t) {
  switch (t) {
    case KVDType::f32: return "f32";
    case KVDType::f16: return "f16";
    case KVDType::bf16: return "bf16";
    case KVDType::int8: return "int8";
    case KVDType::fp8: return "fp8";
  }
  fail("kv_plan: dtype has invalid value ", int(t));
}

std::optional<KVDType> parse_kv_dtype(std::string_view name) {
  for (KVDType t : {KVDType::f32, KVDType::f16, KVDType::bf16, KVDType::int8, KVDType::fp8}) {
    if (kv_dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

void validate(const KVShape& s) {
  check_positive(s.layers, "layers");
  check_positive(s.heads, "heads");
  check_positive(s.kv_heads, "kv_heads");
  check_positive(s.head_dim, "head_dim");
  check(s.heads % s.kv_heads == 0, "kv_plan: heads (", s.heads, ") must be a multiple of kv_heads (",
        s.kv_heads, ")");
  kv_dtype_bytes(s.dtype);   // rejects an out-of-range enum value
}

void validate(const KVPlanOptions& o) {
  check_positive(o.context, "context");
  check_positive(o.batch, "batch");
  check_positive(o.tp, "tp");
  check(std::isfinite(o.bandwidth) && o.bandwidth >= 1,
        "kv_plan: bandwidth must be a finite number of bytes/s >= 1, got ", o.bandwidth);
  check_positive(o.memory, "memory");
}

int64_t kv_bytes_per_token(const KVShape& shape) {
  validate(shape);
  return bytes_per_token_for(shape, shape.kv_heads);
}

KVPlanRow kv_plan(const KVShape& shape, const KVPlanOptions& opts) {
  validate(shape);
  validate(opts);
  KVPlanRow r;
  std::tie(r.kv_heads_per_shard, r.replication) = shard_kv_heads(shape.kv_heads, opts.tp);
  check(shape.heads % opts.tp == 0, "kv_plan: heads (", shape.heads, ") must be divisible by tp (",
        opts.tp, "): query heads are split evenly across shards");
  r.kv_heads = shape.kv_heads;
  r.bytes_per_token = kv_bytes_per_token(shape);
  r.scale_bytes_per_token = shape.dtype == KVDType::int8
      ? 2 * shape.layers * shape.kv_heads * kScaleBytes   // <= bytes_per_token: cannot overflow
      : 0;
  r.bytes_per_sequence = times(r.bytes_per_token, opts.context, "bytes per sequence", "context");
  r.bytes_batch = times(r.bytes_per_sequence, opts.batch, "bytes per batch", "batch");

  // A shard's cache is bytes_per_token scaled to its heads: a 1/P slice when Hkv >= P.
  r.shard_bytes_per_token = bytes_per_token_for(shape, r.kv_heads_per_shard);
  r.shard_bytes_per_sequence = r.shard_bytes_per_token * opts.context;   // <= bytes_per_sequence
  r.shard_bytes_batch = r.shard_bytes_per_sequence * opts.batch;        // <= bytes_batch
  r.total_bytes_batch = times(r.shard_bytes_batch, opts.tp, "bytes across shards", "tp");
  // Shards read their slices in parallel, each at its own device's bandwidth.
  r.read_seconds = double(r.shard_bytes_batch) / opts.bandwidth;
  r.sequences_in_budget = opts.memory / r.shard_bytes_per_sequence;
  return r;
}

KVPlanVariants kv_plan_variants(const KVShape& shape, const KVPlanOptions& opts) {
  KVPlanVariants v;
  v.given = kv_plan(shape, opts);
  KVShape mha = shape, mqa = shape;
  mha.kv_heads = shape.heads;
  mqa.kv_heads = 1;
  v.mha = kv_plan(mha, opts);
  v.mqa = kv_plan(mqa, opts);
  return v;
}

std::span<const KVPreset> kv_presets() { return kPresets; }

std::optional<KVPreset> kv_preset(std::string_view name) {
  for (const KVPreset& p : kPresets) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

std::vector<std::string> kv_preset_names() {
  std::vector<std::string> names;
  for (const KVPreset& p : kPresets) names.emplace_back(p.name);
  return names;
}

KVPlanInputs resolve(const KVPlanRequest& req) {
  std::optional<KVPreset> preset;
  if (!req.preset.empty()) {
    preset = kv_preset(req.preset);
    if (!preset) {
      std::string known;
      for (const KVPreset& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
      fail("kv_plan: unknown preset '", req.preset, "' (known: ", known, ")");
    }
  }
  auto pick = [&](const std::optional<int64_t>& given, int64_t KVShape::*member,
                  std::string_view name) -> int64_t {
    if (given) return *given;
    if (preset) return (*preset).shape.*member;
    fail("kv_plan: ", name, " is required when no preset is given");
  };
  KVPlanInputs in;
  in.shape.layers = pick(req.layers, &KVShape::layers, "layers");
  in.shape.heads = pick(req.heads, &KVShape::heads, "heads");
  in.shape.head_dim = pick(req.head_dim, &KVShape::head_dim, "head_dim");
  in.shape.kv_heads = req.kv_heads ? *req.kv_heads : preset ? preset->shape.kv_heads : in.shape.heads;
  in.shape.dtype = req.dtype ? *req.dtype : preset ? preset->shape.dtype : KVDType::f16;
  check(req.context || preset, "kv_plan: context is required when no preset is given");
  in.options.context = req.context ? *req.context : preset->context;
  in.options.batch = req.batch;
  in.options.tp = req.tp;
  in.options.bandwidth = req.bandwidth;
  in.options.memory = req.memory;
  return in;
}

std::vector<KVPlanField> kv_plan_fields(const KVPlanInputs& in) {
  return {
      {"layers", in.shape.layers},
      {"heads", in.shape.heads},
      {"kv_heads", in.shape.kv_heads},
      {"head_dim", in.shape.head_dim},
      {"dtype", kv_dtype_name(in.shape.dtype)},
      {"bytes_per_element", kv_dtype_bytes(in.shape.dtype)},
      {"context", in.options.context},
      {"batch", in.options.batch},
      {"tp", in.options.tp},
      {"bandwidth", in.options.bandwidth},
      {"memory", in.options.memory},
  };
}

std::vector<KVPlanField> kv_plan_fields(const KVPlanRow& r) {
  return {
      {"kv_heads", r.kv_heads},
      {"bytes_per_token", r.bytes_per_token},
      {"scale_bytes_per_token", r.scale_bytes_per_token},
      {"bytes_per_sequence", r.bytes_per_sequence},
      {"bytes_batch", r.bytes_batch},
      {"kv_heads_per_shard", r.kv_heads_per_shard},
      {"replication", r.replication},
      {"shard_bytes_per_token", r.shard_bytes_per_token},
      {"shard_bytes_per_sequence", r.shard_bytes_per_sequence},
      {"shard_bytes_batch", r.shard_bytes_batch},
      {"total_bytes_batch", r.total_bytes_batch},
      {"read_seconds", r.read_seconds},
      {"sequences_in_budget", r.sequences_in_budget},
  };
}

}  // namespace attnkit
