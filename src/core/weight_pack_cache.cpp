// WeightPackCache and WeightPackScope: packed weights of one training step, keyed by weight address,
// kind and geometry, current on one thread for the step's forward and backward, emptied at its end
// (its entries kept one more step as storage to repack into).
#include "attnkit/core/weight_pack_cache.hpp"

#include <atomic>

namespace attnkit {
namespace {
thread_local WeightPackCache* t_current = nullptr;  // the innermost WeightPackScope's cache
}  // namespace

WeightPackCache::Entry WeightPackCache::get(const WeightPackKey& key,
                                            const std::function<Entry(Entry)>& make) {
  Entry previous;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      ++hits_;
      return it->second;
    }
    if (auto node = previous_.extract(key); node && node.mapped().use_count() == 1) {
      // Held by nobody else: make() may rewrite it. use_count() is a relaxed load, so the fence
      // orders the rewrite after the last holder's release of its copy (and its reads).
      std::atomic_thread_fence(std::memory_order_acquire);
      previous = std::move(node.mapped());
    }
  }
  const bool reused = previous != nullptr;
  Entry made = make(std::move(previous));  // outside the lock: packing may run parallel work
  const std::lock_guard<std::mutex> lock(mu_);
  ++misses_;
  reuses_ += reused;
  return entries_.try_emplace(key, std::move(made)).first->second;
}

void WeightPackCache::clear() {
  const std::lock_guard<std::mutex> lock(mu_);
  previous_ = std::move(entries_);  // drops what the step before did not reuse
  entries_.clear();
}

int64_t WeightPackCache::size() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return int64_t(entries_.size());
}

int64_t WeightPackCache::hits() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t WeightPackCache::misses() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

int64_t WeightPackCache::reuses() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return reuses_;
}

WeightPackScope::WeightPackScope(WeightPackCache& cache) : cache_(cache), saved_(t_current) {
  t_current = &cache;
}

WeightPackScope::~WeightPackScope() {
  cache_.clear();
  t_current = saved_;
}

WeightPackCache* current_weight_pack_cache() { return t_current; }

}  // namespace attnkit
