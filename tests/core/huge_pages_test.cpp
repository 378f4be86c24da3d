// huge_page_alloc: alignment, usable memory of the requested size, std::vector integration.
#include "attnkit/core/huge_pages.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace attnkit {
namespace {

TEST(HugePages, LargeBlocksAre2MiBAlignedAndUsable) {
  for (std::size_t bytes : {std::size_t(2) << 20, (std::size_t(5) << 20) + 12345}) {
    auto* p = static_cast<unsigned char*>(huge_page_alloc(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % (std::uintptr_t(2) << 20), 0u);
    std::memset(p, 0xA5, bytes);  // every byte writable (ASan checks the bounds)
    EXPECT_EQ(p[0], 0xA5);
    EXPECT_EQ(p[bytes - 1], 0xA5);
    huge_page_free(p, bytes);
  }
}

TEST(HugePages, SmallBlocksComeFromOperatorNew) {
  auto* p = static_cast<unsigned char*>(huge_page_alloc(100));
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, 100);
  huge_page_free(p, 100);
}

TEST(HugePages, VectorStorageZeroInitialisesAndGrows) {
  std::vector<std::byte, HugePageAllocator<std::byte>> v(size_t(3) << 20);
  EXPECT_EQ(v.front(), std::byte{0});
  EXPECT_EQ(v.back(), std::byte{0});
  v.resize(size_t(7) << 20, std::byte{3});  // reallocation moves between large blocks
  EXPECT_EQ(v[(size_t(3) << 20) - 1], std::byte{0});
  EXPECT_EQ(v.back(), std::byte{3});
  std::vector<std::byte, HugePageAllocator<std::byte>> small(10, std::byte{7});
  small.resize(size_t(2) << 20);  // small block → large block
  EXPECT_EQ(small[9], std::byte{7});
}

}  // namespace
}  // namespace attnkit
