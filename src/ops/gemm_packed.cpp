// sgemm_packed: C[m, n] = A[m, k]·op(B) with op(B) a weight reordered once into oneDNN's blocked
// matmul layout (oneDNN 2.x matmul primitive, OpenMP runtime; its brgemm kernels on AVX-512/AVX2).
// PyTorch: C = A @ op(B).
//
// Why packed: bench/gemm_libs measured oneDNN's matmul with the weight reordered once at 79-80 %
// of the FMA peak on the GPT/BERT/ViT linear products (y = x·Wᵀ, d_x = d_y·W) against 64-67 % for
// OpenBLAS, which packs B again on every call (docs/performance-data.md). The same library taking every
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
#include <algorithm>
#include <atomic>
#include <memory>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"
#include "core/env_switch.hpp"

#if ATTNKIT_HAVE_DNNL
#include <map>
#include <mutex>

#include <dnnl.hpp>

#include "ops/onednn_matmul.hpp"
#endif

namespace attnkit {
namespace {

// -1 = not read yet, else 0/1.
std::atomic<int> g_enabled{-1};

bool on_by_default() { return true; }

constexpr int64_t kMinRows = 128, kMinSide = 32;  // below these the reorder does not repay

}  // namespace

bool packed_gemm_enabled() { return env_switch(g_enabled, "ATTNKIT_PACKED_GEMM", on_by_default); }

void set_packed_gemm_enabled(bool on) { g_enabled.store(on ? 1 : 0); }

bool packed_gemm_applies(int64_t m, int64_t n, int64_t k) {
  return ATTNKIT_HAVE_DNNL && packed_gemm_enabled() && m >= kMinRows && n >= kMinSide &&
         k >= kMinSide;
}

#if !ATTNKIT_HAVE_DNNL

struct PackedGemmB {};

std::shared_ptr<PackedGemmB> pack_gemm_b(bool, int64_t, int64_t, const float*, int64_t,
                                         std::shared_ptr<PackedGemmB>) {
  fail("pack_gemm_b: attnkit was built without oneDNN (CMake ATTNKIT_WITH_DNNL, libdnnl-dev)");
}

void sgemm_packed(int64_t, const float*, int64_t, const PackedGemmB&, float*, int64_t) {
  fail("sgemm_packed: attnkit was built without oneDNN (CMake ATTNKIT_WITH_DNNL, libdnnl-dev)");
}

#else

namespace {

using dnnl::memory;
using onednn::cached_matmul;
using onednn::cpu_engine;
using onednn::Matmul;
using onednn::strided;
using onednn::thread_stream;
using onednn::user_scratchpad;
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

// The packed weights layout for op(B) [k, n] (oneDNN's choice for kPackedGemmRows rows).
memory::desc packed_desc(int64_t k, int64_t n) {
  cpu_engine();  // constructed before the caches, so destroyed after what was made on it
  static std::mutex mu;
  static std::map<std::pair<int64_t, int64_t>, memory::desc> cache;
  const std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({k, n});
  if (it != cache.end()) return it->second;
  const OpenMpThreadsScope one(1);
  const memory::desc any({k, n}, Dt::f32, memory::format_tag::any);
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(strided(kPackedGemmRows, k, k), any, strided(kPackedGemmRows, n, n)),
      user_scratchpad(), cpu_engine());
  return cache.emplace(std::make_pair(k, n), pd.weights_desc()).first->second;
}

// The cached matmul of m rows (strides lda, ldc) on weights of [k, n] in layout b_md.
const Matmul& matmul_for(int64_t m, int64_t k, int64_t n, int64_t lda, int64_t ldc,
                         const memory::desc& b_md) {
  return cached_matmul(
      {0, m, k, n, lda, ldc},
      [&] {
        return dnnl::matmul::primitive_desc(
            dnnl::matmul::desc(strided(m, k, lda), b_md, strided(m, n, ldc)), user_scratchpad(),
            cpu_engine());
      },
      "sgemm_packed");
}

}  // namespace

struct PackedGemmB {
  int64_t k = 0, n = 0;
  memory::desc md;
  AlignedBuffer data;
};

std::shared_ptr<PackedGemmB> pack_gemm_b(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb,
                                         std::shared_ptr<PackedGemmB> into) {
  check(k > 0 && n > 0 && b != nullptr, "pack_gemm_b: empty weight [", k, ", ", n, "]");
  check(ldb >= (trans_b ? k : n), "pack_gemm_b: ldb = ", ldb, " is less than the row length ",
        trans_b ? k : n);
  const bool reuse = into != nullptr && into->k == k && into->n == n;  // same k, n: same layout
  std::shared_ptr<PackedGemmB> packed = reuse ? std::move(into) : std::make_shared<PackedGemmB>();
  try {
    if (!reuse) {
      packed->k = k, packed->n = n;
      packed->md = packed_desc(k, n);
      packed->data = aligned_bytes(packed->md.get_size());
    }
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
  onednn::run_matmul(mm, a, memory(b.md, cpu_engine(), b.data.get()), c, "sgemm_packed");
}

#endif

}  // namespace attnkit
