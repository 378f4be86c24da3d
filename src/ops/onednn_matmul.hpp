#pragma once
// What the oneDNN matmul callers (gemm_packed.cpp, gemm_onednn.cpp, gemm_bf16.cpp) share (oneDNN
// builds only):
// strided memory descriptors, a cached primitive with its scratchpad size, a one-thread execution
// with a per-thread scratchpad, and bounded primitive caches with a per-thread index (no lock once a
// thread has seen a shape).
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <dnnl.hpp>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "ops/onednn_runtime.hpp"

namespace attnkit::onednn {

// A row-major [rows, cols] f32 matrix with row stride ld (or, when trans, the storage of its
// transpose: [cols, rows] with row stride ld).
inline dnnl::memory::desc strided(int64_t rows, int64_t cols, int64_t ld, bool trans = false) {
  return dnnl::memory::desc({rows, cols}, dnnl::memory::data_type::f32,
                            trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1});
}

// Primitive attributes with a caller-provided (user) scratchpad.
inline dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// A matmul primitive with its source, weights and destination descriptors, scratchpad bytes and
// oneDNN's name for the implementation it chose.
struct Matmul {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
  size_t scratch_bytes = 0;
  std::string impl;
};

// Runs mm from the calling thread with `threads` OpenMP threads (those it was made for), with A at a
// (in mm.a's data type), the weights in b and C at c, using a per-thread scratchpad (who names the
// caller in errors).
inline void run_matmul(const Matmul& mm, const void* a, const dnnl::memory& b, float* c,
                       const char* who, int threads = 1) {
  thread_local AlignedSlot scratch;
  void* scratch_data = scratch.get(mm.scratch_bytes, who);
  const OpenMpThreadsScope scope(threads);
  const dnnl::memory a_mem(mm.a, cpu_engine(), const_cast<void*>(a));
  const dnnl::memory c_mem(mm.c, cpu_engine(), c);
  const dnnl::memory::desc scratch_md({int64_t(std::max<size_t>(mm.scratch_bytes, 1))},
                                      dnnl::memory::data_type::u8, dnnl::memory::format_tag::x);
  const dnnl::memory scratch_mem(scratch_md, cpu_engine(), scratch_data);
  mm.prim.execute(thread_stream(), {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b},
                                    {DNNL_ARG_DST, c_mem}, {DNNL_ARG_SCRATCHPAD, scratch_mem}});
  thread_stream().wait();
}

// Identifies a cached matmul: its kind and shape, strides and flags.
using MatmulKey = std::array<int64_t, 14>;

// Matmuls a cache keeps before it starts afresh (a caller of ever new shapes, such as variable-length
// attention on the naive path, must not grow it without bound).
inline constexpr size_t kMaxCachedMatmuls = 1024;

// The matmul for key, made by make() (a dnnl::matmul::primitive_desc) under
// OpenMpThreadsScope(threads) on first use (oneDNN splits a primitive's work by the thread count at
// creation, so a caller that runs it with several threads puts their count in the key). Each caller
// (each Make type) has its own cache, shared by the threads under a lock, and each thread keeps
// its own index of the entries it has used, so a call takes the lock only for a shape new to its
// thread. Either empties itself past kMaxCachedMatmuls entries (entries stay alive while an index
// holds them); the returned reference is valid until the calling thread's next call. `who` names
// the caller in errors.
template <class Make>
const Matmul& cached_matmul(const MatmulKey& key, Make make, const char* who, int threads = 1) {
  thread_local std::map<MatmulKey, std::shared_ptr<const Matmul>> seen;
  if (const auto it = seen.find(key); it != seen.end()) return *it->second;
  if (seen.size() >= kMaxCachedMatmuls) seen.clear();
  cpu_engine();  // constructed before the cache, so destroyed after what was made on it
  static std::mutex mu;
  static std::map<MatmulKey, std::shared_ptr<const Matmul>> cache;
  std::shared_ptr<const Matmul> entry;
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (const auto it = cache.find(key); it != cache.end()) {
      entry = it->second;
    } else {
      const OpenMpThreadsScope scope(threads);
      try {
        const dnnl::matmul::primitive_desc pd = make();
        entry = std::make_shared<const Matmul>(Matmul{dnnl::matmul(pd), pd.src_desc(), pd.weights_desc(),
                                                      pd.dst_desc(), pd.scratchpad_desc().get_size(),
                                                      pd.impl_info_str()});
      } catch (const dnnl::error& e) {
        fail(who, ": oneDNN could not create the matmul: ", e.what());
      }
      if (cache.size() >= kMaxCachedMatmuls) cache.clear();
      cache.emplace(key, entry);
    }
  }
  return *seen.emplace(key, std::move(entry)).first->second;
}

}  // namespace attnkit::onednn
