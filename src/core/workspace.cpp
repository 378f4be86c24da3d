// Bump arena with 64-byte alignment (cache lines, AVX loads).
#include "attnkit/core/workspace.hpp"

#include <cstdlib>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"

namespace attnkit {
namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void Workspace::FreeDeleter::operator()(void* p) const { std::free(p); }

void Workspace::reserve(size_t bytes) {
  used_ = 0;
  bytes = round_up(bytes == 0 ? kAlign : bytes);
  if (bytes <= capacity_) return;
  void* p = std::aligned_alloc(kAlign, bytes);
  check(p != nullptr, "Workspace: cannot allocate ", bytes, " bytes");
  buffer_.reset(static_cast<std::byte*>(p));
  capacity_ = bytes;
}

void* Workspace::alloc_bytes(size_t bytes) {
  const size_t need = round_up(bytes);
  check(used_ + need <= capacity_, "Workspace: request of ", bytes, " bytes exceeds capacity ",
        capacity_, " (", used_, " in use)");
  void* p = buffer_.get() + used_;
  used_ += need;
  return p;
}

std::vector<Workspace>& thread_workspaces(size_t bytes) {
  thread_local std::vector<Workspace> spaces;  // per calling thread: nested users stay separate
  const size_t n = size_t(num_threads());
  if (spaces.size() < n) spaces.resize(n);
  for (auto& w : spaces) w.reserve(bytes);
  return spaces;
}

}  // namespace attnkit
