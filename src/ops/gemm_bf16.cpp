// gemm_bf16: oneDNN's matmul with bfloat16 source and weights and a float32 destination
// (float32 accumulation). A and B are rounded to bf16 by attnkit (round_to_bf16, vectorised by the
// compiler) into compact copies in their stored orientation; the matmul reads op(A) and op(B)
// through strides and packs them for AMX tiles or AVX512-BF16 itself. (oneDNN's own reorders
// into its blocked weight layout measured 2-5x slower than this conversion on 2048 × 688
// operands.) beta ≠ 0 is a sum post-op.
//
// Primitives are cached per (transposes, m, n, k, ldc, beta, threads) by onednn::cached_matmul:
// none is created per call once a shape has been seen, and a thread takes no lock for a shape it
// has used before (each thread's index keeps up to kMaxCachedMatmuls primitives alive). They are
// created and run with blas_threads() OpenMP threads (OpenMpThreadsScope), whatever OpenMP's
// global default is: oneDNN sizes its blocking for the threads it sees at creation, and a
// primitive made for 2 threads left a spinning OpenMP worker behind on 1-thread runs. oneDNN may split K over threads for small m·n (weight gradients),
// so results are not promised bitwise equal across thread counts. Each call brings its own
// scratchpad, so one-thread calls may run concurrently (inside attnkit's parallel regions).
#include "attnkit/ops/gemm_bf16.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "attnkit/core/dtype.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"

#if ATTNKIT_HAVE_DNNL
#include <bit>

#include <dnnl.hpp>

#include "ops/onednn_matmul.hpp"
#include "ops/onednn_runtime.hpp"
#endif

namespace attnkit {

float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

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

// C = beta·C for a k = 0 product (nothing to sum).
void scale_only(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
}

// dst[r·cols + c] = f32_to_bf16(src[r·ld + c]) for r < rows, c < cols, rows split over
// blas_threads() threads.
void to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst) {
  auto convert_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* in = src + r * ld;
      uint16_t* out = dst + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = f32_to_bf16(in[c]);
    }
  };
  constexpr int64_t kRowsPerTask = 64;
  const int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  if (blas_threads() <= 1 || tasks <= 1) return convert_rows(0, rows);
  parallel_for(tasks, [&](int64_t i) {
    convert_rows(i * kRowsPerTask, std::min(rows, (i + 1) * kRowsPerTask));
  });
}

using dnnl::memory;
using DataType = memory::data_type;
using onednn::cpu_engine;

// op(X) [rows, cols] of a compact row-major bf16 X (X is [cols, rows] when trans).
memory::desc compact_bf16(int64_t rows, int64_t cols, bool trans) {
  return memory::desc({rows, cols}, DataType::bf16, trans ? memory::dims{1, rows} : memory::dims{cols, 1});
}

// The matmul of op(A)·op(B) on compact bf16 copies into C [m, n] (row stride ldc), C += when
// beta ≠ 0 (a sum post-op), made for and run with `threads` OpenMP threads (oneDNN sizes its
// blocking for the threads at creation). A scratchpad per call (user mode): calls from several
// threads at once (the convolutions' one-thread products inside a parallel region) must not share
// the library's.
const onednn::Matmul& matmul_for(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t ldc, float beta,
                                 int threads) {
  return onednn::cached_matmul(
      {ta, tb, m, n, k, ldc, int64_t(std::bit_cast<uint32_t>(beta)), threads},
      [&] {
        dnnl::primitive_attr attr = onednn::user_scratchpad();
        if (beta != 0) {
          dnnl::post_ops po;
          po.append_sum(beta);
          attr.set_post_ops(po);
        }
        const memory::desc c32({m, n}, DataType::f32, memory::dims{ldc, 1});
        return dnnl::matmul::primitive_desc(
            dnnl::matmul::desc(compact_bf16(m, k, ta), compact_bf16(k, n, tb), c32), attr, cpu_engine());
      },
      "gemm_bf16", threads);
}

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
  return matmul_for(false, true, 2048, 688, 256, 688, 0.0f, blas_threads()).impl;
}

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  check(gemm_bf16_available(), "gemm_bf16: ", gemm_bf16_unavailable_reason());
  check(m >= 0 && n >= 0 && k >= 0, "gemm_bf16: negative size m ", m, ", n ", n, ", k ", k);
  if (m == 0 || n == 0) return;
  check(lda >= std::max<int64_t>(1, ta ? m : k) && ldb >= std::max<int64_t>(1, tb ? k : n) &&
            ldc >= std::max<int64_t>(1, n),
        "gemm_bf16: row strides lda ", lda, ", ldb ", ldb, ", ldc ", ldc, " are too small");
  check(c != nullptr && (k == 0 || (a != nullptr && b != nullptr)), "gemm_bf16: null operand");
  if (k == 0) return scale_only(m, n, beta, c, ldc);
  const int threads = blas_threads();
  const onednn::Matmul& mm = matmul_for(ta, tb, m, n, k, ldc, beta, threads);
  thread_local onednn::AlignedSlot a_buf, b_buf;  // the bf16 copies
  auto* a16 = static_cast<uint16_t*>(a_buf.get(size_t(m * k) * sizeof(uint16_t), "gemm_bf16"));
  auto* b16 = static_cast<uint16_t*>(b_buf.get(size_t(k * n) * sizeof(uint16_t), "gemm_bf16"));
  to_bf16(a, ta ? k : m, ta ? m : k, lda, a16);  // as stored: [k, m] when ta
  to_bf16(b, tb ? n : k, tb ? k : n, ldb, b16);
  onednn::run_matmul(mm, a16, memory(mm.b, cpu_engine(), b16), c, "gemm_bf16", threads);
}

#endif

}  // namespace attnkit
