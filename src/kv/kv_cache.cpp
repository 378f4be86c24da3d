// KV cache storage and policies (see kv_cache.hpp): slot mapping, appends, logical-order segments.
#include "attnkit/kv/kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attnkit/core/error.hpp"

namespace attnkit {

namespace {
int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  check(!__builtin_mul_overflow(a, b, &r), "KVCache: ", what, " overflows 64 bits");
  return r;
}
}  // namespace

DType parse_kv_storage_dtype(std::string_view s, std::string_view what) {
  if (s == "f32" || s == "float32") return DType::f32;
  if (s == "f16" || s == "float16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "int8" || s == "i8") return DType::i8;
  fail(what, ": expected f32, f16, bf16 or int8, got '", s, "'");
}

float kv_store_row(const float* src, DType dtype, int64_t n, std::byte* dst) {
  switch (dtype) {
    case DType::f32:
      std::memcpy(dst, src, size_t(n) * 4);
      return 1.0f;
    case DType::f16:
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = dtype == DType::f16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return 1.0f;
    case DType::i8: {
      float amax = 0;
      for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::abs(src[i]));
      const float scale = amax > 0 ? amax / 127.0f : 1.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float q = std::nearbyint(src[i] / scale);
        dst[i] = std::byte(uint8_t(int8_t(std::clamp(q, -127.0f, 127.0f))));
      }
      return scale;
    }
    default:
      fail("KVCache: unsupported storage dtype ", dtype_name(dtype));
  }
}

KVPolicy parse_kv_policy(std::string_view name, std::string_view what) {
  for (KVPolicy p : {KVPolicy::dense, KVPolicy::window, KVPolicy::sink, KVPolicy::paged, KVPolicy::recompute})
    if (name == kv_policy_name(p)) return p;
  fail(what, ": expected dense, window, sink, paged or recompute, got '", name, "'");
}

const char* kv_policy_name(KVPolicy p) {
  switch (p) {
    case KVPolicy::dense: return "dense";
    case KVPolicy::window: return "window";
    case KVPolicy::sink: return "sink";
    case KVPolicy::paged: return "paged";
    case KVPolicy::recompute: return "recompute";
  }
  return "?";
}

KVCache::KVCache(const KVCacheConfig& c) : config_(c) {
  check(c.layers >= 1, "KVCache: layers must be >= 1, got ", c.layers);
  check(c.kv_heads >= 1, "KVCache: kv_heads must be >= 1, got ", c.kv_heads);
  check(c.head_dim >= 1, "KVCache: head_dim must be >= 1, got ", c.head_dim);
  check(c.max_sequences >= 1, "KVCache: max_sequences must be >= 1, got ", c.max_sequences);
  check(c.dtype == DType::f32 || c.dtype == DType::f16 || c.dtype == DType::bf16 ||
            c.dtype == DType::i8,
        "KVCache: dtype must be f32, f16, bf16 or int8, got ", dtype_name(c.dtype));
  int64_t tokens = 0;  // token rows per layer
  switch (c.policy) {
    case KVPolicy::dense:
      check(c.capacity >= 1, "KVCache: capacity must be >= 1 for the dense policy, got ", c.capacity);
      slots_ = c.capacity;
      tokens = checked_mul(slots_, c.max_sequences, "capacity × max_sequences");
      break;
    case KVPolicy::window:
      check(c.window >= 1, "KVCache: window must be >= 1 for the window policy, got ", c.window);
      slots_ = c.window;
      tokens = checked_mul(slots_, c.max_sequences, "window × max_sequences");
      break;
    case KVPolicy::sink:
      check(c.window >= 1, "KVCache: window must be >= 1 for the sink policy, got ", c.window);
      check(c.sink_tokens >= 0, "KVCache: sink_tokens must be >= 0, got ", c.sink_tokens);
      slots_ = c.sink_tokens + c.window;
      tokens = checked_mul(slots_, c.max_sequences, "(sink_tokens + window) × max_sequences");
      break;
    case KVPolicy::paged: {
      check(c.capacity >= 1, "KVCache: capacity must be >= 1 for the paged policy, got ", c.capacity);
      check(c.block_size >= 1, "KVCache: block_size must be >= 1, got ", c.block_size);
      check(c.num_blocks >= 0, "KVCache: num_blocks must be >= 0, got ", c.num_blocks);
      slots_ = c.capacity;
      const int64_t per_seq = (c.capacity + c.block_size - 1) / c.block_size;
      config_.num_blocks =
          c.num_blocks > 0 ? c.num_blocks : checked_mul(per_seq, c.max_sequences, "blocks");
      tokens = checked_mul(config_.num_blocks, c.block_size, "num_blocks × block_size");
      for (int64_t b = config_.num_blocks - 1; b >= 0; --b) free_blocks_.push_back(b);
      break;
    }
    case KVPolicy::recompute:
      fail("KVCache: recompute keeps no cache (a streaming-evaluation policy); use dense, window, sink or paged");
  }
  elem_ = int64_t(dtype_size(c.dtype));
  row_ = checked_mul(c.kv_heads, c.head_dim, "kv_heads × head_dim");
  const int64_t layer_bytes = checked_mul(checked_mul(tokens, row_, "cache elements"), elem_, "cache bytes");
  const int64_t scale_bytes = c.dtype == DType::i8 ? checked_mul(checked_mul(2 * c.layers, tokens, "scales"),
                                                                  c.kv_heads * 4, "scale bytes")
                                                     : 0;
  nbytes_ = checked_mul(2 * c.layers, layer_bytes, "cache bytes") + scale_bytes;
  // A size that cannot be allocated throws std::bad_alloc (the CLI and the Python module report
  // it as out of memory).
  k_.resize(size_t(c.layers));
  v_.resize(size_t(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) {
    k_[size_t(l)].resize(size_t(layer_bytes));
    v_[size_t(l)].resize(size_t(layer_bytes));
  }
  if (c.dtype == DType::i8) {
    k_scale_.assign(size_t(c.layers), std::vector<float>(size_t(tokens * c.kv_heads), 1.0f));
    v_scale_.assign(size_t(c.layers), std::vector<float>(size_t(tokens * c.kv_heads), 1.0f));
  }
  seqs_.resize(size_t(c.max_sequences));
}

int64_t KVCache::bytes_per_token() const {
  const int64_t scales = config_.dtype == DType::i8 ? 2 * config_.layers * config_.kv_heads * 4 : 0;
  return 2 * config_.layers * row_ * elem_ + scales;
}

int64_t KVCache::add_sequence() {
  for (size_t s = 0; s < seqs_.size(); ++s)
    if (!seqs_[s].active) {
      seqs_[s] = Sequence{true, std::vector<int64_t>(size_t(config_.layers), 0), {}};
      return int64_t(s);
    }
  fail("KVCache: all ", seqs_.size(), " sequences are in use (max_sequences); free one first");
}

void KVCache::free_sequence(int64_t seq) {
  check_seq(seq);
  Sequence& s = seqs_[size_t(seq)];
  // Return blocks so that the lowest ids are handed out first again.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) free_blocks_.push_back(*it);
  std::sort(free_blocks_.begin(), free_blocks_.end(), std::greater<>());
  s = Sequence{};
}

bool KVCache::active(int64_t seq) const {
  return seq >= 0 && seq < int64_t(seqs_.size()) && seqs_[size_t(seq)].active;
}

void KVCache::check_seq(int64_t seq) const {
  check(seq >= 0 && seq < int64_t(seqs_.size()), "KVCache: sequence ", seq, " out of range [0, ",
        seqs_.size(), ")");
  check(seqs_[size_t(seq)].active, "KVCache: sequence ", seq, " is not active (never added or freed)");
}

void KVCache::check_layer(int64_t layer) const {
  check(layer >= 0 && layer < config_.layers, "KVCache: layer ", layer, " out of range [0, ",
        config_.layers, ")");
}

int64_t KVCache::slot_of(const Sequence&, int64_t pos) const {
  switch (config_.policy) {
    case KVPolicy::window:
      return pos % config_.window;
    case KVPolicy::sink:
      return pos < config_.sink_tokens ? pos : config_.sink_tokens + (pos - config_.sink_tokens) % config_.window;
    default:
      return pos;
  }
}

int64_t KVCache::slot_offset(int64_t seq, const Sequence& s, int64_t slot) const {
  if (config_.policy != KVPolicy::paged) return seq * slots_ + slot;
  return s.blocks[size_t(slot / config_.block_size)] * config_.block_size + slot % config_.block_size;
}

void KVCache::append(int64_t seq, int64_t layer, ConstView3 k, ConstView3 v) {
  check_seq(seq);
  check_layer(layer);
  const int64_t n = k.shape[0], hkv = config_.kv_heads, d = config_.head_dim;
  check_view_extents(k, "KVCache.append: k");
  check_view_extents(v, "KVCache.append: v");
  check(k.shape[1] == hkv && k.shape[2] == d, "KVCache.append: k must be [n, ", hkv, ", ", d,
        "], got [", k.shape[0], ", ", k.shape[1], ", ", k.shape[2], "]");
  check(v.shape == k.shape, "KVCache.append: v shape must equal k shape");
  check(k.inner_contiguous() && v.inner_contiguous(), "KVCache.append: last dim must be contiguous");
  // Finite, and finite once stored: f16 holds at most ±65504, bf16 about ±3.39e38.
  const DType dt = config_.dtype;
  auto stored_finite = [dt](float x) {
    if (dt == DType::f16) return std::isfinite(f16_to_f32(f32_to_f16(x)));
    if (dt == DType::bf16) return std::isfinite(bf16_to_f32(f32_to_bf16(x)));
    return true;
  };
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t e = 0; e < d; ++e) {
        check(std::isfinite(k(t, h, e)) && std::isfinite(v(t, h, e)),
              "KVCache.append: non-finite value in k or v at [", t, ", ", h, ", ", e, "]");
        check(stored_finite(k(t, h, e)) && stored_finite(v(t, h, e)), "KVCache.append: k or v at [", t, ", ",
              h, ", ", e, "] (", k(t, h, e), ", ", v(t, h, e), ") is outside the range of the ",
              dtype_name(dt), " cache");
      }
  Sequence& s = seqs_[size_t(seq)];
  const int64_t len = s.length[size_t(layer)];
  if (config_.policy == KVPolicy::dense || config_.policy == KVPolicy::paged)
    check(len + n <= slots_, "KVCache.append: sequence ", seq, " layer ", layer, " holds ", len,
          " tokens; ", n, " more exceed its capacity ", slots_);
  if (config_.policy == KVPolicy::paged) {  // claim blocks first; fail without side effects
    const int64_t need = (len + n + config_.block_size - 1) / config_.block_size;
    const int64_t extra = need - int64_t(s.blocks.size());
    check(extra <= int64_t(free_blocks_.size()), "KVCache.append: block pool exhausted (sequence ",
          seq, " needs ", extra, " more blocks, ", free_blocks_.size(), " free)");
    for (int64_t b = 0; b < extra; ++b) {
      s.blocks.push_back(free_blocks_.back());
      free_blocks_.pop_back();
    }
  }
  auto& kb = k_[size_t(layer)];
  auto& vb = v_[size_t(layer)];
  for (int64_t t = 0; t < n; ++t) {
    const int64_t tok = slot_offset(seq, s, slot_of(s, len + t));
    for (int64_t h = 0; h < hkv; ++h) {
      const int64_t at = tok * row_ + h * d;
      const float ks = kv_store_row(k.ptr(t, h), config_.dtype, d, kb.data() + at * elem_);
      const float vs = kv_store_row(v.ptr(t, h), config_.dtype, d, vb.data() + at * elem_);
      if (config_.dtype == DType::i8) {
        k_scale_[size_t(layer)][size_t(tok * hkv + h)] = ks;
        v_scale_[size_t(layer)][size_t(tok * hkv + h)] = vs;
      }
    }
  }
  s.length[size_t(layer)] = len + n;
}

int64_t KVCache::length(int64_t seq, int64_t layer) const {
  check_seq(seq);
  check_layer(layer);
  return seqs_[size_t(seq)].length[size_t(layer)];
}

int64_t KVCache::cached(int64_t seq, int64_t layer) const {
  return std::min(length(seq, layer), slots_);
}

std::vector<int64_t> KVCache::positions(int64_t seq, int64_t layer) const {
  const int64_t len = length(seq, layer), held = cached(seq, layer);
  std::vector<int64_t> pos;
  pos.reserve(size_t(held));
  const int64_t sinks = config_.policy == KVPolicy::sink ? std::min(config_.sink_tokens, len) : 0;
  for (int64_t p = 0; p < sinks; ++p) pos.push_back(p);
  for (int64_t p = len - (held - sinks); p < len; ++p) pos.push_back(p);
  return pos;
}

std::vector<KVSegment> KVCache::segments(int64_t seq, int64_t layer) const {
  const int64_t len = length(seq, layer);
  const Sequence& s = seqs_[size_t(seq)];
  std::vector<KVSegment> out;
  auto add = [&](int64_t slot, int64_t n, int64_t logical) {
    if (n <= 0) return;
    const int64_t tok = slot_offset(seq, s, slot);
    const bool i8 = config_.dtype == DType::i8;
    out.push_back({k_[size_t(layer)].data() + tok * row_ * elem_,
                   v_[size_t(layer)].data() + tok * row_ * elem_,
                   i8 ? k_scale_[size_t(layer)].data() + tok * config_.kv_heads : nullptr,
                   i8 ? v_scale_[size_t(layer)].data() + tok * config_.kv_heads : nullptr, n,
                   logical});
  };
  // A ring of `size` slots starting at slot `base` holding the last min(count, size) of `count`
  // tokens: oldest first.
  auto ring = [&](int64_t base, int64_t size, int64_t count, int64_t logical) {
    if (count <= size) return add(base, count, logical);
    const int64_t start = count % size;
    add(base + start, size - start, logical);
    add(base, start, logical + size - start);
  };
  switch (config_.policy) {
    case KVPolicy::dense:
      add(0, len, 0);
      break;
    case KVPolicy::window:
      ring(0, config_.window, len, 0);
      break;
    case KVPolicy::sink: {
      const int64_t sinks = std::min(config_.sink_tokens, len);
      add(0, sinks, 0);
      ring(config_.sink_tokens, config_.window, len - sinks, sinks);
      break;
    }
    case KVPolicy::paged:
      for (int64_t b = 0; b * config_.block_size < len; ++b)
        add(b * config_.block_size, std::min(config_.block_size, len - b * config_.block_size),
            b * config_.block_size);
      break;
    case KVPolicy::recompute:  // refused by the constructor: no cache to list
      break;
  }
  return out;
}

void KVCache::gather(int64_t seq, int64_t layer, View3 k, View3 v) const {
  const int64_t held = cached(seq, layer), hkv = config_.kv_heads, d = config_.head_dim;
  check(k.shape[0] == held && k.shape[1] == hkv && k.shape[2] == d && v.shape == k.shape,
        "KVCache.gather: k and v must be [", held, ", ", hkv, ", ", d, "]");
  check_view_extents(k, "KVCache.gather: k");
  check_view_extents(v, "KVCache.gather: v");
  check(k.inner_contiguous() && v.inner_contiguous(), "KVCache.gather: last dim must be contiguous");
  for (const KVSegment& sg : segments(seq, layer))
    for (int64_t t = 0; t < sg.n; ++t)
      for (int64_t h = 0; h < hkv; ++h) {
        const int64_t at = (t * hkv + h) * d * elem_;
        kv_load_row(sg.k + at, config_.dtype, sg.k_scale ? sg.k_scale[t * hkv + h] : 1.0f, d,
                    k.ptr(sg.logical_start + t, h));
        kv_load_row(sg.v + at, config_.dtype, sg.v_scale ? sg.v_scale[t * hkv + h] : 1.0f, d,
                    v.ptr(sg.logical_start + t, h));
      }
}

}  // namespace attnkit
