#pragma once
// What every oneDNN caller in attnkit shares (oneDNN builds only): the one CPU engine, one stream
// per thread, and 64-byte aligned per-thread buffers grown on demand.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>

#include <dnnl.hpp>

#include "attnkit/core/error.hpp"

namespace attnkit::onednn {

// The process's oneDNN CPU engine (constructed on first use, before any cache built on it).
inline dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// The calling thread's stream (a stream is not to be shared by concurrently executing threads).
inline dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

// A 64-byte aligned buffer of at least the bytes asked for, kept and grown on demand; `what`
// names the caller in the out-of-memory error.
class AlignedSlot {
 public:
  void* get(size_t bytes, const char* what) {
    if (!data_ || bytes > size_) {
      const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
      data_.reset(std::aligned_alloc(64, rounded));
      check(data_ != nullptr, what, ": out of memory (", bytes, " bytes)");
      size_ = rounded;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> data_;
  size_t size_ = 0;
};

}  // namespace attnkit::onednn
