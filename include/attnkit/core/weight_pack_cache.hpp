#pragma once
// WeightPackCache: weights prepared for a kernel (reordered into a GEMM library's blocked layout,
// packed into panels, converted) once per optimizer step, and reused by every product of that step
// that reads the same weight (a linear layer's forward y = x·Wᵀ and its backward d_x = d_y·W each
// read W in their own packed layout).
//
// The rule that keeps a packed weight from ever being stale: a cache entry is only valid while
// nobody writes the weight it was made from. So a cache is
//   - owned by the training loop (TrainingLoop holds one per trainer; any other owner must follow
//     the same rule), and made current on the thread that runs a step's forward and backward by a
//     WeightPackScope that covers exactly that forward and backward, during which no weight is
//     written;
//   - emptied when the scope ends, before the optimizer updates the weights.
// What an emptied cache keeps is storage, never values: the entries of the scope just ended wait
// (until the next clear) to be handed to make() as the previous packing of their key, which make()
// repacks in place from the updated weight. So a training step writes its packings into the
// buffers of the step before instead of into freshly mapped memory (no page faults per step).
// Entries are keyed by address, so within a scope a cached kernel must only be given weights that
// live at least as long as the step (model parameters), never a temporary buffer that could be
// freed and another weight made at the same address before the scope ends.
// Outside any scope current_weight_pack_cache() is null and kernels pack on every call, so weights
// written by the optimizer, by Python, by a checkpoint load or by a finite-difference test are always
// read anew. Kernels look the cache up on the thread that called them (before their parallel_for):
// the current cache is per thread, never process-wide.
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace attnkit {

// What a packed weight was made for: each kernel family has its own kind, so one weight packed
// for two kernels (or two layouts) has two entries.
enum class WeightPackKind : int {
  kGemmB = 1,  // ops/gemm.hpp: op(W) as the B operand of sgemm_packed (dims: trans, k, n, ldb)
};

// A packed weight's identity: the weight's first element, the packing kind, and the geometry the
// packing depends on (shape, strides, transposes; unused dims 0).
struct WeightPackKey {
  const void* data = nullptr;
  WeightPackKind kind = WeightPackKind::kGemmB;
  int64_t dims[4] = {0, 0, 0, 0};
  auto operator<=>(const WeightPackKey&) const = default;
};

// Packed weights of one optimizer step, keyed by WeightPackKey. Thread-safe.
class WeightPackCache {
 public:
  using Entry = std::shared_ptr<void>;
  // The entry for key: the stored one if it was made since the last clear(), else make(previous)'s
  // result (stored), where previous is the entry the key had before the last clear() when nobody
  // else holds it (else null): make() may rewrite it in place and return it. make() runs without
  // the cache's lock held.
  Entry get(const WeightPackKey& key, const std::function<Entry(Entry previous)>& make);
  // Typed get: the entry for key as a const T (make takes and returns std::shared_ptr<T>; one
  // kind, one T).
  template <class T, class Make>
  std::shared_ptr<const T> get_as(const WeightPackKey& key, Make&& make) {
    return std::static_pointer_cast<const T>(
        get(key, [&](Entry previous) -> Entry { return make(std::static_pointer_cast<T>(std::move(previous))); }));
  }
  // Empties the cache (the weights may be written after this); the entries stay as storage for
  // the next make() of their key until the following clear().
  void clear();
  // Entries now; lookups served from an entry (hits) and by make() (misses) since construction;
  // misses whose make() was given the previous entry of their key (reuses).
  int64_t size() const;
  int64_t hits() const;
  int64_t misses() const;
  int64_t reuses() const;

 private:
  mutable std::mutex mu_;
  std::map<WeightPackKey, Entry> entries_, previous_;
  int64_t hits_ = 0, misses_ = 0, reuses_ = 0;
};

// Makes `cache` the calling thread's current cache for the scope's lifetime (a training step's
// forward and backward) and clears it when the scope ends (normally or by an exception), before
// anything may write the weights. Scopes nest; the previous current cache is restored.
class WeightPackScope {
 public:
  explicit WeightPackScope(WeightPackCache& cache);
  ~WeightPackScope();
  WeightPackScope(const WeightPackScope&) = delete;
  WeightPackScope& operator=(const WeightPackScope&) = delete;

 private:
  WeightPackCache& cache_;
  WeightPackCache* saved_;
};

// The calling thread's current cache (the innermost WeightPackScope's), or null outside any scope.
WeightPackCache* current_weight_pack_cache();

}  // namespace attnkit
