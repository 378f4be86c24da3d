#pragma once
// Storage for large buffers that are streamed end to end (the KV cache): blocks of at least
// 2 MiB start on a 2 MiB boundary and are marked for transparent huge pages, so a pass over
// them walks one page table entry per 2 MiB instead of one per 4 KiB. Smaller blocks come from
// operator new. The advice is a hint: where the kernel gives no huge pages, nothing changes.
#include <cstddef>

namespace attnkit {

// Allocates `bytes` (2 MiB-aligned and madvise(MADV_HUGEPAGE) when bytes >= 2 MiB); throws
// std::bad_alloc on failure.
void* huge_page_alloc(std::size_t bytes);
// Frees a block from huge_page_alloc; `bytes` must be the size it was allocated with.
void huge_page_free(void* p, std::size_t bytes) noexcept;

// std::allocator replacement over huge_page_alloc, for std::vector storage.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(huge_page_alloc(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { huge_page_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
};

}  // namespace attnkit
