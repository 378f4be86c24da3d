// KV-cache memory planner: M_tok = 2·L·Hkv·D·b (+ int8 scales), per sequence, per batch, per
// tensor-parallel shard, read time at a bandwidth, concurrency under a budget. See kv_plan.hpp.
#include "attnkit/kv/kv_plan.hpp"

#include <array>
#include <cmath>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

constexpr int64_t kScaleBytes = 4;   // one float32 scale per token per KV head, for K and for V

// a · b, or attnkit::Error saying which quantity overflowed and from what.
int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    fail("kv_plan: ", what, " overflows a 64-bit byte count (", a, " * ", b, ")");
  }
  return r;
}

// Bytes per token for `kv_heads` heads of `shape` (K and V, all layers, int8 scales included).
int64_t bytes_per_token_for(const KVShape& s, int64_t kv_heads, std::string_view what) {
  const int64_t per_head = s.dtype == KVDType::int8
      ? checked_mul(s.head_dim, kv_dtype_bytes(s.dtype), what) + kScaleBytes
      : checked_mul(s.head_dim, kv_dtype_bytes(s.dtype), what);
  return checked_mul(checked_mul(2 * s.layers, kv_heads, what), per_head, what);
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
  check(std::isfinite(o.bandwidth) && o.bandwidth > 0,
        "kv_plan: bandwidth must be a finite number of bytes/s > 0, got ", o.bandwidth);
  check_positive(o.memory, "memory");
}

int64_t kv_bytes_per_token(const KVShape& shape) {
  validate(shape);
  return bytes_per_token_for(shape, shape.kv_heads, "bytes per token (2*layers*kv_heads*head_dim*b)");
}

KVPlanRow kv_plan(const KVShape& shape, const KVPlanOptions& opts) {
  validate(shape);
  validate(opts);
  check(shape.heads % opts.tp == 0, "kv_plan: heads (", shape.heads, ") must be divisible by tp (",
        opts.tp, "): query heads are split evenly across shards");
  KVPlanRow r;
  r.kv_heads = shape.kv_heads;
  r.bytes_per_token = kv_bytes_per_token(shape);
  r.scale_bytes_per_token = shape.dtype == KVDType::int8
      ? 2 * shape.layers * shape.kv_heads * kScaleBytes   // <= bytes_per_token: cannot overflow
      : 0;
  r.bytes_per_sequence = checked_mul(r.bytes_per_token, opts.context, "bytes per sequence (bytes per token * context)");
  r.bytes_batch = checked_mul(r.bytes_per_sequence, opts.batch, "bytes per batch (bytes per sequence * batch)");

  std::tie(r.kv_heads_per_shard, r.replication) = shard_kv_heads(shape.kv_heads, opts.tp);
  // A shard's cache is bytes_per_token scaled to its heads; it divides the whole when Hkv >= P.
  r.shard_bytes_per_token = bytes_per_token_for(shape, r.kv_heads_per_shard, "shard bytes per token");
  r.shard_bytes_per_sequence = checked_mul(r.shard_bytes_per_token, opts.context, "shard bytes per sequence");
  r.shard_bytes_batch = checked_mul(r.shard_bytes_per_sequence, opts.batch, "shard bytes per batch");
  r.total_bytes_batch = checked_mul(r.shard_bytes_batch, opts.tp, "bytes across shards");
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
