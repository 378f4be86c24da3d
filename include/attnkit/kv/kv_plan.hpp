#pragma once
// KV-cache memory planner: what a decoder's key/value cache costs for a model shape.
//
//   M_tok = 2 · L · Hkv · D · b          bytes per token (K and V, every layer, every KV head)
//
// plus, for int8 storage, one float32 scale per token per KV head for K and for V:
// 2 · L · Hkv · 4 more bytes per token. A sequence of S tokens holds S · M_tok bytes, a batch
// B · S · M_tok; one decoding step reads the whole cache once, so bytes / bandwidth is its lower
// bound from memory traffic. Every layer is assumed to cache the full context (no sliding-window
// layers). With tensor parallelism over P shards, query heads split evenly (H % P == 0); KV heads
// split evenly when Hkv >= P (Hkv % P == 0), otherwise each shard holds one KV head and each KV
// head is replicated P / Hkv times (P % Hkv == 0), as in Megatron-LM and vLLM.
// All sizes are int64 bytes computed with overflow checks; bad input throws attnkit::Error naming
// the field by its Python keyword (the CLI option is the same name with - for _: kv_heads, --kv-heads).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace attnkit {

// Storage type of the cache. int8 carries float32 scales per token per KV head (K and V);
// fp8 (e4m3 or e5m2) uses one per-tensor scale, so no per-token bytes.
enum class KVDType : uint8_t { f32, f16, bf16, int8, fp8 };

// Bytes per stored element b (4, 2, 2, 1, 1).
int64_t kv_dtype_bytes(KVDType t);
// Lower-case name ("f32", "f16", "bf16", "int8", "fp8").
std::string_view kv_dtype_name(KVDType t);
// Parses a name as printed by kv_dtype_name; nullopt if unknown.
std::optional<KVDType> parse_kv_dtype(std::string_view name);

// Attention shape of a decoder, as far as the KV cache is concerned.
struct KVShape {
  int64_t layers = 0;      // L
  int64_t heads = 0;       // H, query heads (H % Hkv == 0)
  int64_t kv_heads = 0;    // Hkv: H = MHA, 1 = MQA, in between = GQA
  int64_t head_dim = 0;    // D
  KVDType dtype = KVDType::f16;
};

// What to plan for.
inline constexpr double kDefaultKVBandwidth = 3.35e12;   // B/s, H100 SXM HBM3
inline constexpr int64_t kDefaultKVMemory = 80'000'000'000;   // B, one 80 GB GPU

struct KVPlanOptions {
  int64_t context = 0;                        // S, tokens per sequence
  int64_t batch = 1;                          // B, sequences decoded together
  int64_t tp = 1;                             // P, tensor-parallel shards
  double bandwidth = kDefaultKVBandwidth;     // bytes/s of memory per device (per shard)
  int64_t memory = kDefaultKVMemory;          // bytes per device left for the KV cache
};

// The plan for one shape. Byte counts are exact; read_seconds is the only rounded value.
struct KVPlanRow {
  int64_t kv_heads = 0;                  // Hkv of this row
  int64_t bytes_per_token = 0;           // M_tok = 2·L·Hkv·D·b (+ 2·L·Hkv·4 for int8)
  int64_t scale_bytes_per_token = 0;     // the int8 scales' share of bytes_per_token, else 0
  int64_t bytes_per_sequence = 0;        // M_tok · S
  int64_t bytes_batch = 0;               // M_tok · S · B
  int64_t kv_heads_per_shard = 0;        // Hkv / P if Hkv >= P, else 1
  int64_t replication = 0;               // copies of each KV head across shards: max(1, P / Hkv)
  int64_t shard_bytes_per_token = 0;     // one shard's M_tok
  int64_t shard_bytes_per_sequence = 0;  // one shard's bytes for one sequence
  int64_t shard_bytes_batch = 0;         // one shard's bytes for the batch
  int64_t total_bytes_batch = 0;         // shard_bytes_batch · P = bytes_batch · replication
  double read_seconds = 0;               // shard_bytes_batch / bandwidth: per decoded token, >= this
  int64_t sequences_in_budget = 0;       // floor(memory / shard_bytes_per_sequence)
};

// The given shape and its MHA (Hkv = H) and MQA (Hkv = 1) variants under the same options.
struct KVPlanVariants {
  KVPlanRow given, mha, mqa;
};

// A named public model shape with a planning context (tokens).
struct KVPreset {
  std::string_view name;
  KVShape shape;
  int64_t context = 0;
  std::string_view note;   // where the shape comes from; caveats
};

// Throws attnkit::Error naming the field unless every size is >= 1 and H % Hkv == 0.
void validate(const KVShape& shape);
// Throws attnkit::Error naming the field unless context, batch, tp, memory >= 1 and bandwidth > 0.
void validate(const KVPlanOptions& opts);

// Bytes one token adds to the cache, K and V over all layers and KV heads (int8 scales included).
int64_t kv_bytes_per_token(const KVShape& shape);
// The plan for `shape` under `opts`; throws attnkit::Error on bad input or int64 overflow.
KVPlanRow kv_plan(const KVShape& shape, const KVPlanOptions& opts);
// kv_plan for `shape` and for its MHA and MQA variants.
KVPlanVariants kv_plan_variants(const KVShape& shape, const KVPlanOptions& opts);

// Every built-in preset, in display order.
std::span<const KVPreset> kv_presets();
// The preset called `name`; nullopt if there is none.
std::optional<KVPreset> kv_preset(std::string_view name);
// The preset names, in display order.
std::vector<std::string> kv_preset_names();

// Inputs as a user gives them (CLI options, Python keywords): a preset and/or explicit values.
struct KVPlanRequest {
  std::string preset;                           // "" = none
  std::optional<int64_t> layers, heads, head_dim;   // override the preset's; required without one
  std::optional<int64_t> kv_heads;              // default: the preset's, else heads (MHA)
  std::optional<KVDType> dtype;                 // default: the preset's, else f16
  std::optional<int64_t> context;               // default: the preset's; required without one
  int64_t batch = 1;
  int64_t tp = 1;
  double bandwidth = kDefaultKVBandwidth;       // bytes/s per device
  int64_t memory = kDefaultKVMemory;            // bytes per device
};

// A request resolved to a shape and options (explicit values win over the preset's).
struct KVPlanInputs {
  KVShape shape;
  KVPlanOptions options;
};
// Resolves `req`; throws attnkit::Error for an unknown preset or a missing required value.
KVPlanInputs resolve(const KVPlanRequest& req);

// One output field: the key shared by the CLI's --json and the Python dict, and its value.
struct KVPlanField {
  std::string_view key;
  std::variant<int64_t, double, std::string_view> value;
};
// The inputs in output order: layers, heads, kv_heads, head_dim, dtype, bytes_per_element,
// context, batch, tp, bandwidth (B/s), memory (B).
std::vector<KVPlanField> kv_plan_fields(const KVPlanInputs& in);
// The fields of a row in output order (the names of KVPlanRow's members).
std::vector<KVPlanField> kv_plan_fields(const KVPlanRow& row);

}  // namespace attnkit
