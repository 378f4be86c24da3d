#pragma once
// KV cache: per layer, K and V of many sequences stored as [slot, Hkv, D] (token-major, all heads
// of a token together, so decode reads memory in address order) in f32, f16, bf16 or int8 (one
// float32 scale per token per head, for K and for V). Policies decide which tokens stay:
//   dense   every token, up to `capacity` per sequence (appending past it is an error);
//   window  the last `window` tokens, in a ring;
//   sink    the first `sink_tokens` tokens pinned forever plus the last `window` in a ring
//           (StreamingLLM, Xiao et al. 2023);
//   paged   fixed-size blocks of `block_size` tokens from a shared pool of `num_blocks`, a block
//           table per sequence (vLLM's PagedAttention layout); blocks return to the pool when a
//           sequence is freed; running out is an error for that sequence only.
// (The fifth policy, recompute, keeps no cache: streaming evaluation re-computes a sliding
// window per token, tools/stream_eval.hpp; KVCache refuses it.)
// "Sink tokens" are these pinned cache entries; the learned per-head "sink logits" added to the
// softmax denominator are another thing (nn/attention_block.hpp).
// Keys are stored as given (before RoPE when the caller uses rope-on-read in decode): the cache
// position of a token is its index in the cache's logical order (sinks 0..sink_tokens-1, then the
// window oldest first), which is what StreamingLLM rotates keys by.
// Every mutation validates first and changes nothing when it throws attnkit::Error.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "attnkit/core/dtype.hpp"
#include "attnkit/core/huge_pages.hpp"
#include "attnkit/core/tensor.hpp"

namespace attnkit {

// Which tokens a KV cache keeps (see above), for the cache, the generator and streaming evaluation.
enum class KVPolicy : uint8_t { dense, window, sink, paged, recompute };

// The policy called `name` ("dense", "window", "sink", "paged", "recompute"); throws
// attnkit::Error naming `what` (a flag or argument) otherwise.
KVPolicy parse_kv_policy(std::string_view name, std::string_view what = "policy");
// The name parse_kv_policy accepts for p.
const char* kv_policy_name(KVPolicy p);

struct KVCacheConfig {
  int64_t layers = 1;
  int64_t kv_heads = 1;         // Hkv
  int64_t head_dim = 64;        // D
  int64_t capacity = 0;         // dense, paged: max tokens per sequence; window/sink: ignored
  DType dtype = DType::f16;     // f32, f16, bf16 or i8
  KVPolicy policy = KVPolicy::dense;
  int64_t window = 0;           // window, sink: recent tokens kept
  int64_t sink_tokens = 0;      // sink: first tokens pinned (StreamingLLM's sink tokens)
  int64_t block_size = 16;      // paged: tokens per block
  int64_t num_blocks = 0;       // paged: pool size; 0 = enough for max_sequences × capacity
  int64_t max_sequences = 1;    // sequences held at once
};

// A run of cache slots that are contiguous in memory and in logical order.
struct KVSegment {
  const std::byte* k;           // [n, Hkv, D] elements of the storage dtype
  const std::byte* v;
  const float* k_scale;         // [n, Hkv] (int8 only, else nullptr)
  const float* v_scale;
  int64_t n;                    // tokens
  int64_t logical_start;        // cache position of the first token
};

class KVCache {
 public:
  // Allocates all storage up front (what `kv-plan` predicts); throws attnkit::Error on bad config.
  explicit KVCache(const KVCacheConfig& config);

  const KVCacheConfig& config() const { return config_; }
  // Slots per sequence: capacity (dense), window, sink_tokens + window (sink), capacity (paged).
  int64_t slots_per_sequence() const { return slots_; }
  // Bytes of K/V storage and int8 scales allocated (block tables and bookkeeping excluded).
  int64_t nbytes() const { return nbytes_; }
  // Bytes per token across all layers: 2·L·Hkv·D·b (+ 2·L·Hkv·4 for int8), as kv_plan computes.
  int64_t bytes_per_token() const;

  // Claims a free sequence id in [0, max_sequences); throws when all are in use.
  int64_t add_sequence();
  // Releases a sequence (and, paged, its blocks); its id may be handed out again.
  void free_sequence(int64_t seq);
  // True if seq is a live sequence id.
  bool active(int64_t seq) const;

  // Appends n tokens' K and V ([n, Hkv, D] float32) to one layer of a sequence, converting to the
  // storage dtype (round to nearest even; int8 with scale max|x|/127 per token per head).
  void append(int64_t seq, int64_t layer, ConstView3 k, ConstView3 v);
  // Tokens ever appended to this layer of the sequence (its stream position).
  int64_t length(int64_t seq, int64_t layer) const;
  // Tokens currently held for this layer of the sequence (<= slots_per_sequence()).
  int64_t cached(int64_t seq, int64_t layer) const;
  // Stream position of every cached token, in cache (logical) order.
  std::vector<int64_t> positions(int64_t seq, int64_t layer) const;
  // The cached tokens as runs of memory, in address order within each run.
  std::vector<KVSegment> segments(int64_t seq, int64_t layer) const;
  // Cached K and V of one layer of a sequence converted to float32, in logical order:
  // k, v [cached, Hkv, D] (for tests and tools; decode reads the storage directly).
  void gather(int64_t seq, int64_t layer, View3 k, View3 v) const;
  // Free blocks left in the paged pool (0 for other policies).
  int64_t free_blocks() const { return int64_t(free_blocks_.size()); }

 private:
  struct Sequence {
    bool active = false;
    std::vector<int64_t> length;       // per layer: tokens appended
    std::vector<int64_t> blocks;       // paged: physical block ids (shared by all layers)
  };
  int64_t slot_of(const Sequence& s, int64_t pos) const;   // storage slot of stream position pos
  int64_t slot_offset(int64_t seq, const Sequence& s, int64_t slot) const;  // token index in pool
  void check_seq(int64_t seq) const;
  void check_layer(int64_t layer) const;

  KVCacheConfig config_;
  int64_t slots_ = 0, elem_ = 0, row_ = 0;  // slots per sequence, element bytes, Hkv·D
  int64_t nbytes_ = 0;
  using Storage = std::vector<std::byte, HugePageAllocator<std::byte>>;
  std::vector<Storage> k_, v_;                     // per layer: [tokens_total, Hkv, D]
  std::vector<std::vector<float>> k_scale_, v_scale_;  // per layer: [tokens_total, Hkv] (int8)
  std::vector<Sequence> seqs_;
  std::vector<int64_t> free_blocks_;               // paged pool, lowest id handed out first
};

// Storage dtype from its name ("f32", "f16", "bf16", "int8"; also "float32", "float16",
// "bfloat16", "i8"); throws attnkit::Error starting with `what` (the option's name) otherwise.
DType parse_kv_storage_dtype(std::string_view name, std::string_view what);

// Converts n stored elements of `dtype` (f32, f16, bf16, or i8 times `scale`) to float32.
void kv_load_row(const std::byte* src, DType dtype, float scale, int64_t n, float* dst);
// Converts `rows` consecutive stored rows of n elements (row i scaled by scales[i] for i8; scales
// may be null otherwise) to float32 rows at dst + i·dst_stride.
void kv_load_rows(const std::byte* src, DType dtype, const float* scales, int64_t rows, int64_t n,
                  float* dst, int64_t dst_stride);
// Converts n floats to `dtype` storage; for i8 returns the scale used (max|x|/127), else 1.
float kv_store_row(const float* src, DType dtype, int64_t n, std::byte* dst);

}  // namespace attnkit
