// gemm_bf16: oneDNN's matmul with bfloat16 source and weights and a float32 destination
// (float32 accumulation). The float32 operands are converted by oneDNN reorders straight into the
// layouts the matmul chose (format_tag::any: A as rows of K, B packed for AMX tiles or
// AVX512-BF16), which also absorbs op(A) and op(B). beta ≠ 0 is a sum post-op.
//
// Primitives (matmul and its two reorders) are cached per (transposes, m, n, k, strides, beta):
// none is created per call once a shape has been seen. They run on blas_threads() OpenMP threads
// (OpenMpThreadsScope), whatever OpenMP's global default is. oneDNN may split K over threads for
// small m·n (weight gradients), so results are not promised bitwise equal across thread counts.
#include "attnkit/ops/gemm_bf16.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"

#if ATTNKIT_HAVE_DNNL
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include <dnnl.hpp>
#endif

namespace attnkit {

float round_to_bf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return std::bit_cast<float>((u | 0x00400000u) & 0xffff0000u);  // stay quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // ties to even; overflow rounds to ±inf as it should
  return std::bit_cast<float>(u & 0xffff0000u);
}

namespace {

// C = beta·C for a k = 0 product (nothing to sum).
void scale_only(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
}

}  // namespace

#if !ATTNKIT_HAVE_DNNL

bool gemm_bf16_available() { return false; }
std::string gemm_bf16_unavailable_reason() {
  return "attnkit was built without oneDNN (CMake ATTNKIT_WITH_DNNL, libdnnl-dev)";
}
std::string gemm_bf16_implementation() { return ""; }
void gemm_bf16(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
               float, float*, int64_t) {
  fail("gemm_bf16: ", gemm_bf16_unavailable_reason());
}

#else

namespace {

using dnnl::memory;
using DataType = memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One stream per thread (a stream is not to be shared by concurrently executing threads).
dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

// op(X) [rows, cols] of a row-major X with row stride ld (X is [cols, rows] when trans).
memory::desc stored(int64_t rows, int64_t cols, bool trans, int64_t ld) {
  return memory::desc({rows, cols}, DataType::f32, trans ? memory::dims{1, ld} : memory::dims{ld, 1});
}

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float>;

struct Plan {
  dnnl::matmul matmul;
  dnnl::reorder to_a, to_b;  // float32 as stored → bf16 in the matmul's layouts
  memory::desc a32, b32, c32, a16, b16;
  std::string impl;
};

std::unique_ptr<Plan> make_plan(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                                int64_t ldb, int64_t ldc, float beta) {
  auto& eng = cpu_engine();
  auto p = std::make_unique<Plan>();
  p->a32 = stored(m, k, ta, lda), p->b32 = stored(k, n, tb, ldb), p->c32 = stored(m, n, false, ldc);
  const memory::desc a_any({m, k}, DataType::bf16, memory::format_tag::any);
  const memory::desc b_any({k, n}, DataType::bf16, memory::format_tag::any);
  dnnl::primitive_attr attr;
  if (beta != 0) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_any, b_any, p->c32), attr, eng);
  p->matmul = dnnl::matmul(pd);
  p->a16 = pd.src_desc(), p->b16 = pd.weights_desc();
  p->to_a = dnnl::reorder(dnnl::reorder::primitive_desc(eng, p->a32, eng, p->a16));
  p->to_b = dnnl::reorder(dnnl::reorder::primitive_desc(eng, p->b32, eng, p->b16));
  p->impl = pd.impl_info_str();
  return p;
}

Plan& plan_for(const Key& key) {
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<Plan>> plans;
  const std::lock_guard<std::mutex> lock(mutex);
  auto& slot = plans[key];
  if (!slot) {
    const auto [ta, tb, m, n, k, lda, ldb, ldc, beta] = key;
    slot = make_plan(ta, tb, m, n, k, lda, ldb, ldc, beta);
  }
  return *slot;
}

// A 64-byte aligned per-thread buffer for the bf16 copies, grown on demand.
class AlignedSlot {
 public:
  void* get(size_t bytes) {
    if (bytes > size_) {
      data_.reset(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
      check(data_ != nullptr, "gemm_bf16: out of memory (", bytes, " bytes of bf16 operands)");
      size_ = bytes;
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

bool cpu_has_bf16() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

}  // namespace

bool gemm_bf16_available() {
  static const bool available = cpu_has_bf16();
  return available;
}

std::string gemm_bf16_unavailable_reason() {
  if (gemm_bf16_available()) return "";
  return "this CPU has no bf16 dot products (AVX512-BF16 or AMX-BF16) that oneDNN can use";
}

std::string gemm_bf16_implementation() {
  if (!gemm_bf16_available()) return "";
  return plan_for(Key{false, true, 2048, 688, 256, 256, 256, 688, 0.0f}).impl;
}

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  check(gemm_bf16_available(), "gemm_bf16: ", gemm_bf16_unavailable_reason());
  check(m >= 0 && n >= 0 && k >= 0, "gemm_bf16: negative size m ", m, ", n ", n, ", k ", k);
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_only(m, n, beta, c, ldc);
  check(lda >= std::max<int64_t>(1, ta ? m : k) && ldb >= std::max<int64_t>(1, tb ? k : n) &&
            ldc >= std::max<int64_t>(1, n),
        "gemm_bf16: row strides lda ", lda, ", ldb ", ldb, ", ldc ", ldc, " are too small");
  Plan& p = plan_for(Key{ta, tb, m, n, k, lda, ldb, ldc, beta});
  thread_local AlignedSlot a_buf, b_buf;
  auto& eng = cpu_engine();
  auto& strm = thread_stream();
  const OpenMpThreadsScope threads(blas_threads());
  memory a32(p.a32, eng, const_cast<float*>(a)), b32(p.b32, eng, const_cast<float*>(b));
  memory a16(p.a16, eng, a_buf.get(p.a16.get_size())), b16(p.b16, eng, b_buf.get(p.b16.get_size()));
  memory c32(p.c32, eng, c);
  p.to_a.execute(strm, a32, a16);
  p.to_b.execute(strm, b32, b16);
  p.matmul.execute(strm, {{DNNL_ARG_SRC, a16}, {DNNL_ARG_WEIGHTS, b16}, {DNNL_ARG_DST, c32}});
  strm.wait();
}

#endif

}  // namespace attnkit
