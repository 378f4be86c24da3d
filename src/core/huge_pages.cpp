// Huge-page-aligned allocation (see huge_pages.hpp).
#include "attnkit/core/huge_pages.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace attnkit {
namespace {
constexpr std::size_t kHugePage = std::size_t(2) << 20;
}

void* huge_page_alloc(std::size_t bytes) {
  if (bytes < kHugePage) return ::operator new(bytes);
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, bytes) != 0) throw std::bad_alloc();
  // Advice only: without transparent huge pages (or with them disabled) this fails harmlessly.
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

void huge_page_free(void* p, std::size_t bytes) noexcept {
  if (bytes < kHugePage) {
    ::operator delete(p);
  } else {
    std::free(p);
  }
}

}  // namespace attnkit
