// sgemm_packed: C[m, n] = A[m, k]·op(B) with op(B) a weight reordered once into oneDNN's blocked
// matmul layout (oneDNN 2.x matmul primitive, OpenMP runtime; its brgemm kernels on AVX-512/AVX2).
// PyTorch: C = A @ op(B).
//
// Why packed: bench/gemm_libs measured oneDNN's matmul with the weight reordered once at 79-80 %
// of the FMA peak on the GPT/BERT/ViT linear products (y = x·Wᵀ, d_x = d_y·W) against 64-67 % for
// OpenBLAS, which packs B again on every call (docs/performance.md). The same library taking every
// operand in place with strides lost inside training (it chose its slower gemm:jit kernels).
//
// Layout: the packing is the weights layout oneDNN chooses (format_tag::any) for a product of
// kPackedGemmRows rows; every product of fewer rows is made with that layout given explicitly, so
// one packed weight serves every row tile.
// Threads and determinism: every primitive is created and executed under OpenMpThreadsScope(1),
// so oneDNN opens no OpenMP region and one call is one thread's work; callers split rows into fixed
// tiles (nn::weight_product), so results do not depend on the thread count. Scratchpads are per
// thread (user mode), so threads may execute the same primitive at once.
// Primitives are cached per (m, k, n, lda, ldc): none is created per call once a shape was seen.
// sgemm_tn_onednn (ops/gemm_wgrad.hpp): the weight-gradient products C = Aᵀ·B (+ C) on the same
// matmul primitive with A's transpose given by strides and beta = 1 as a sum post-op, under the same
// one-thread rule; measured on Zen 5 (1 thread) at 135-155 GFLOP/s on the GPT-small d_W shapes
// against 80-90 for OpenBLAS's Haswell kernels and 140-155 for its SkylakeX ones.
#include <algorithm>
#include <atomic>
#include <memory>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/gemm_wgrad.hpp"
#include "core/env_switch.hpp"

#if ATTNKIT_HAVE_DNNL
#include <map>
#include <mutex>
#include <tuple>

#include <dnnl.hpp>

#include "ops/onednn_runtime.hpp"
#endif

namespace attnkit {
namespace {

// -1 = not read yet, else 0/1.
std::atomic<int> g_enabled{-1};
std::atomic<int> g_wgrad_enabled{-1};

bool on_by_default() { return true; }

constexpr int64_t kMinRows = 128, kMinSide = 32;  // below these the reorder does not repay

}  // namespace

bool packed_gemm_enabled() { return env_switch(g_enabled, "ATTNKIT_PACKED_GEMM", on_by_default); }

void set_packed_gemm_enabled(bool on) { g_enabled.store(on ? 1 : 0); }

bool packed_gemm_applies(int64_t m, int64_t n, int64_t k) {
  return ATTNKIT_HAVE_DNNL && packed_gemm_enabled() && m >= kMinRows && n >= kMinSide &&
         k >= kMinSide;
}

bool wgrad_gemm_enabled() { return env_switch(g_wgrad_enabled, "ATTNKIT_WGRAD_GEMM", on_by_default); }

void set_wgrad_gemm_enabled(bool on) { g_wgrad_enabled.store(on ? 1 : 0); }

bool wgrad_gemm_applies(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMinWgradSide = 16;
  return ATTNKIT_HAVE_DNNL && wgrad_gemm_enabled() && m >= kMinWgradSide && n >= kMinWgradSide &&
         k >= kMinWgradSide;
}

#if !ATTNKIT_HAVE_DNNL

void sgemm_tn_onednn(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float,
                     float*, int64_t) {
  fail("sgemm_tn_onednn: attnkit was built without oneDNN (CMake ATTNKIT_WITH_DNNL, libdnnl-dev)");
}

struct PackedGemmB {};

std::shared_ptr<const PackedGemmB> pack_gemm_b(bool, int64_t, int64_t, const float*, int64_t) {
  fail("pack_gemm_b: attnkit was built without oneDNN (CMake ATTNKIT_WITH_DNNL, libdnnl-dev)");
}

void sgemm_packed(int64_t, const float*, int64_t, const PackedGemmB&, float*, int64_t) {
  fail("sgemm_packed: attnkit was built without oneDNN (CMake ATTNKIT_WITH_DNNL, libdnnl-dev)");
}

#else

namespace {

using dnnl::memory;
using onednn::cpu_engine;
using onednn::thread_stream;
using Dt = memory::data_type;

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<char, AlignedFree>;

AlignedBuffer aligned_bytes(size_t bytes) {
  AlignedBuffer buf(static_cast<char*>(std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64)));
  check(buf != nullptr, "sgemm_packed: out of memory (", bytes, " bytes)");
  return buf;
}

// A row-major [rows, cols] f32 matrix with row stride ld (or its transpose's storage when trans).
memory::desc strided(int64_t rows, int64_t cols, int64_t ld, bool trans = false) {
  return memory::desc({rows, cols}, Dt::f32, trans ? memory::dims{1, ld} : memory::dims{ld, 1});
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

struct Matmul {
  dnnl::matmul prim;
  memory::desc a, c;
  size_t scratch_bytes = 0;
};

// Runs a cached matmul on the calling thread, single-threaded, with A and C at a and c and the
// weights in b, using a per-thread scratchpad (who names the caller in errors).
void run_matmul(const Matmul& mm, const float* a, const memory& b, float* c, const char* who) {
  thread_local onednn::AlignedSlot scratch;
  void* scratch_data = scratch.get(mm.scratch_bytes, who);
  const OpenMpThreadsScope one(1);
  const memory a_mem(mm.a, cpu_engine(), const_cast<float*>(a));
  const memory c_mem(mm.c, cpu_engine(), c);
  const memory::desc scratch_md({int64_t(std::max<size_t>(mm.scratch_bytes, 1))}, Dt::u8,
                                memory::format_tag::x);
  const memory scratch_mem(scratch_md, cpu_engine(), scratch_data);
  mm.prim.execute(thread_stream(), {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b},
                                    {DNNL_ARG_DST, c_mem}, {DNNL_ARG_SCRATCHPAD, scratch_mem}});
  thread_stream().wait();
}

std::mutex& cache_mutex() {
  static std::mutex mu;
  return mu;
}

// The packed weights layout for op(B) [k, n] (oneDNN's choice for kPackedGemmRows rows).
memory::desc packed_desc(int64_t k, int64_t n) {
  cpu_engine();  // constructed before the caches, so destroyed after what was made on it
  static std::map<std::pair<int64_t, int64_t>, memory::desc> cache;
  const std::lock_guard<std::mutex> lock(cache_mutex());
  auto it = cache.find({k, n});
  if (it != cache.end()) return it->second;
  const OpenMpThreadsScope one(1);
  const memory::desc any({k, n}, Dt::f32, memory::format_tag::any);
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(strided(kPackedGemmRows, k, k), any, strided(kPackedGemmRows, n, n)),
      user_scratchpad(), cpu_engine());
  return cache.emplace(std::make_pair(k, n), pd.weights_desc()).first->second;
}

// The cached matmul of m rows (strides lda, ldc) on weights in layout b_md.
const Matmul& matmul_for(int64_t m, int64_t k, int64_t n, int64_t lda, int64_t ldc,
                         const memory::desc& b_md) {
  cpu_engine();
  static std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<Matmul>> cache;
  const std::lock_guard<std::mutex> lock(cache_mutex());
  std::unique_ptr<Matmul>& entry = cache[{m, k, n, lda, ldc}];
  if (!entry) {
    const OpenMpThreadsScope one(1);  // oneDNN splits a primitive's work by the count at creation
    try {
      const memory::desc a = strided(m, k, lda), c = strided(m, n, ldc);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b_md, c), user_scratchpad(),
                                            cpu_engine());
      entry = std::make_unique<Matmul>(Matmul{dnnl::matmul(pd), a, c, pd.scratchpad_desc().get_size()});
    } catch (const dnnl::error& e) {
      cache.erase({m, k, n, lda, ldc});
      fail("sgemm_packed: oneDNN could not create the matmul: ", e.what());
    }
  }
  return *entry;
}

// The cached matmul C[m, n] (= or +=) Aᵀ·B, A [k, m] and B [k, n] in place with their strides.
const Matmul& tn_matmul_for(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                            bool accumulate) {
  cpu_engine();
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
  static std::map<Key, std::unique_ptr<Matmul>> cache;
  const Key key{m, n, k, lda, ldb, ldc, accumulate};
  const std::lock_guard<std::mutex> lock(cache_mutex());
  std::unique_ptr<Matmul>& entry = cache[key];
  if (!entry) {
    const OpenMpThreadsScope one(1);
    try {
      const memory::desc a = strided(m, k, lda, true), b = strided(k, n, ldb), c = strided(m, n, ldc);
      dnnl::primitive_attr attr = user_scratchpad();
      if (accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
      entry = std::make_unique<Matmul>(Matmul{dnnl::matmul(pd), a, c, pd.scratchpad_desc().get_size()});
    } catch (const dnnl::error& e) {
      cache.erase(key);
      fail("sgemm_tn_onednn: oneDNN could not create the matmul: ", e.what());
    }
  }
  return *entry;
}

}  // namespace

void sgemm_tn_onednn(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                     int64_t ldb, float beta, float* c, int64_t ldc) {
  check(m >= 0 && n >= 0 && k >= 0, "sgemm_tn_onednn: negative size [", m, ", ", n, "] over ", k);
  check(beta == 0.0f || beta == 1.0f, "sgemm_tn_onednn: beta = ", beta, " (0 or 1 only)");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0.0f)
      for (int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    return;
  }
  check(a != nullptr && b != nullptr && c != nullptr, "sgemm_tn_onednn: null A, B or C");
  check(lda >= m && ldb >= n && ldc >= n, "sgemm_tn_onednn: lda = ", lda, ", ldb = ", ldb,
        " or ldc = ", ldc, " is less than the row length (m = ", m, ", n = ", n, ")");
  const Matmul& mm = tn_matmul_for(m, n, k, lda, ldb, ldc, beta == 1.0f);
  run_matmul(mm, a, memory(strided(k, n, ldb), cpu_engine(), const_cast<float*>(b)), c,
             "sgemm_tn_onednn");
}

struct PackedGemmB {
  int64_t k = 0, n = 0;
  memory::desc md;
  AlignedBuffer data;
};

std::shared_ptr<const PackedGemmB> pack_gemm_b(bool trans_b, int64_t k, int64_t n, const float* b,
                                               int64_t ldb) {
  check(k > 0 && n > 0 && b != nullptr, "pack_gemm_b: empty weight [", k, ", ", n, "]");
  check(ldb >= (trans_b ? k : n), "pack_gemm_b: ldb = ", ldb, " is less than the row length ",
        trans_b ? k : n);
  auto packed = std::make_shared<PackedGemmB>();
  packed->k = k, packed->n = n;
  try {
    packed->md = packed_desc(k, n);
    packed->data = aligned_bytes(packed->md.get_size());
    const OpenMpThreadsScope one(1);
    memory from(strided(k, n, ldb, trans_b), cpu_engine(), const_cast<float*>(b));
    memory to(packed->md, cpu_engine(), packed->data.get());
    dnnl::reorder(from, to).execute(thread_stream(), from, to);
    thread_stream().wait();
  } catch (const dnnl::error& e) {
    fail("pack_gemm_b: oneDNN could not pack the weight [", k, ", ", n, "]: ", e.what());
  }
  return packed;
}

void sgemm_packed(int64_t m, const float* a, int64_t lda, const PackedGemmB& b, float* c, int64_t ldc) {
  check(m >= 0, "sgemm_packed: m = ", m, " is negative");
  if (m == 0) return;
  check(a != nullptr && c != nullptr, "sgemm_packed: null A or C");
  check(lda >= b.k && ldc >= b.n, "sgemm_packed: lda = ", lda, " or ldc = ", ldc,
        " is less than the row length (k = ", b.k, ", n = ", b.n, ")");
  check(m <= kPackedGemmRows, "sgemm_packed: m = ", m, " exceeds kPackedGemmRows = ", kPackedGemmRows);
  const Matmul& mm = matmul_for(m, b.k, b.n, lda, ldc, b.md);
  run_matmul(mm, a, memory(b.md, cpu_engine(), b.data.get()), c, "sgemm_packed");
}

#endif

}  // namespace attnkit
