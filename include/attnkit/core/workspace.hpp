#pragma once
// Workspace: a bump arena of 64-byte-aligned float scratch, sized once and reused, so kernels do
// no allocation in their hot loops. One Workspace per thread (see thread_workspaces()).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace attnkit {

// Aligned to a cache line: thread_workspaces() keeps one per thread side by side, and a thread's
// bump pointer sharing a line with its neighbour's would bounce between the cores on every alloc.
class alignas(64) Workspace {
 public:
  Workspace() = default;
  // Reserves capacity for `bytes` and empties the arena (invalidates earlier pointers).
  void reserve(size_t bytes);
  // Empties the arena; capacity is kept.
  void reset() { used_ = 0; }
  // `n` uninitialised elements of T, 64-byte aligned; throws attnkit::Error past the capacity.
  template <class T>
  T* alloc(size_t n) {
    return static_cast<T*>(alloc_bytes(n * sizeof(T)));
  }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }

 private:
  void* alloc_bytes(size_t bytes);
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  std::unique_ptr<std::byte, FreeDeleter> buffer_;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

// Per-thread workspaces, one for each thread index of parallel_for, each reserved to `bytes`.
std::vector<Workspace>& thread_workspaces(size_t bytes);

}  // namespace attnkit
