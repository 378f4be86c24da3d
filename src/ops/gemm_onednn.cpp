// sgemm_onednn: sgemm's one-thread products on oneDNN's matmul (oneDNN 2.x, OpenMP runtime), every
// operand in place with its strides, transposes as strides, beta = 1 as a sum post-op.
// Threads and determinism: each primitive is created and executed under OpenMpThreadsScope(1)
// (onednn_matmul.hpp), so a call is one thread's work and its result depends on its arguments only.
// Primitives are cached per (transposes, shape, strides, beta): none is created per call once a
// thread has seen a shape.
// Measured (bench/gemm_libs, Zen 5, 1 thread): the CNN's convolution GEMMs 155–206 GFLOP/s against
// 90–104 for OpenBLAS's Haswell kernels but 144–193 for its SkylakeX ones, which the CNN's training
// steps ran 1.0–1.1× faster than oneDNN (also with only the convolutions' Aᵀ·B column gradients on
// oneDNN); the GPT-small weight gradients (Aᵀ·B over 2048 tokens) 177–188 against 101–103 (Haswell)
// and 140–155 (SkylakeX). Hence the rule of sgemm_onednn_applies. A batch of products (the
// Winograd convolutions' 16 per chunk) as one batched matmul ran the CNN's training as fast as
// OpenBLAS's calls one by one with AVX2 kernels on both sides and 0.98–1.10× faster with AVX-512
// ones, hence sgemm_batched_applies without a kernel condition.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "attnkit/core/error.hpp"
#include "attnkit/ops/gemm_onednn.hpp"
#include "ops/blas_kernels.hpp"

#if ATTNKIT_HAVE_DNNL
#include <dnnl.hpp>

#include "ops/onednn_matmul.hpp"
#endif

namespace attnkit {
namespace {

// -1 = not decided yet, else the SgemmPath's value.
std::atomic<int> g_sgemm_path{-1};

constexpr double kMinFlops = 32.0 * 32.0 * 32.0;  // m·n·k below which OpenBLAS keeps the call
// m·n·k below which OpenBLAS keeps a product that only the wider kernels would send to oneDNN: the
// GPT's LM-head tiles (64 × 261 × 256, 4.3 M) trained about 10 % slower on oneDNN, the CNN's
// convolution products (10.8 M and up) faster.
constexpr double kMinWideFlops = double(1 << 23);

#if ATTNKIT_HAVE_DNNL
// True when oneDNN's kernels are AVX-512 ones (its effective ISA, which ONEDNN_MAX_CPU_ISA caps)
// while OpenBLAS's are not.
bool onednn_wider_than_blas() {
  static const bool wider = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    return (isa & avx512) == avx512 && !blas_kernels_avx512();
  }();
  return wider;
}
#else
bool onednn_wider_than_blas() { return false; }
#endif

}  // namespace

SgemmPath parse_sgemm_path(std::string_view name) {
  if (name == "openblas") return SgemmPath::kOpenBlas;
  if (name == "auto") return SgemmPath::kAuto;
  if (name == "onednn") return SgemmPath::kOneDnn;
  fail("sgemm path: expected 'openblas', 'auto' or 'onednn', got '", name, "'");
}

const char* sgemm_path_name(SgemmPath path) {
  return path == SgemmPath::kOpenBlas ? "openblas" : path == SgemmPath::kOneDnn ? "onednn" : "auto";
}

SgemmPath sgemm_path() {
  int p = g_sgemm_path.load();
  if (p < 0) {
    const char* env = std::getenv("ATTNKIT_SGEMM_PATH");
    SgemmPath chosen = SgemmPath::kAuto;
    if (env) {
      // Read on first use, which may be inside a parallel region: a bad value is reported, not
      // thrown (an exception there would end the process).
      try {
        chosen = parse_sgemm_path(env);
      } catch (const Error& e) {
        std::fprintf(stderr, "attnkit: ignoring ATTNKIT_SGEMM_PATH: %s; using 'auto'\n", e.what());
      }
    }
    int unset = -1;
    g_sgemm_path.compare_exchange_strong(unset, int(chosen));
    p = g_sgemm_path.load();
  }
  return SgemmPath(p);
}

void set_sgemm_path(SgemmPath path) { g_sgemm_path.store(int(path)); }

bool sgemm_onednn_applies(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          float beta) {
  const double flops = double(m) * double(n) * double(k);
  if (!ATTNKIT_HAVE_DNNL || alpha != 1.0f || (beta != 0.0f && beta != 1.0f) || m <= 0 || n <= 0 ||
      k <= 0 || flops < kMinFlops)
    return false;
  const SgemmPath path = sgemm_path();
  if (path != SgemmPath::kAuto) return path == SgemmPath::kOneDnn;
  const bool weight_gradient = trans_a && !trans_b && k >= std::max(m, n);
  return weight_gradient || (onednn_wider_than_blas() && flops >= kMinWideFlops);
}

bool sgemm_batched_applies(int64_t batch, int64_t m, int64_t n, int64_t k, float beta) {
  return ATTNKIT_HAVE_DNNL && sgemm_path() != SgemmPath::kOpenBlas && (beta == 0.0f || beta == 1.0f) &&
         batch > 0 && m > 0 && n > 0 && k > 0 &&
         double(batch) * double(m) * double(n) * double(k) >= kMinFlops;
}

#if !ATTNKIT_HAVE_DNNL

void sgemm_onednn(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                  int64_t, float, float*, int64_t) {
  fail("sgemm_onednn: attnkit was built without oneDNN (CMake ATTNKIT_WITH_DNNL, libdnnl-dev)");
}

void sgemm_batched_onednn(bool, bool, int64_t, int64_t, int64_t, int64_t, const float*, int64_t,
                          int64_t, const float*, int64_t, int64_t, float, float*, int64_t, int64_t) {
  fail("sgemm_batched_onednn: attnkit was built without oneDNN (CMake ATTNKIT_WITH_DNNL, libdnnl-dev)");
}

#else

namespace {

// [batch, rows, cols] f32 matrices, entry i at i·stride, each row-major with row stride ld (or,
// when trans, the storage of its transpose).
dnnl::memory::desc batched(int64_t batch, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                           bool trans = false) {
  return dnnl::memory::desc({batch, rows, cols}, dnnl::memory::data_type::f32,
                            trans ? dnnl::memory::dims{stride, 1, ld} : dnnl::memory::dims{stride, ld, 1});
}

// The operands of sgemm_onednn (batch 0: one product, two-dimensional descriptors) or of
// sgemm_batched_onednn (batch >= 1 entries at the strides).
struct Operands {
  bool ta, tb;
  int64_t batch, m, n, k;
  const float* a;
  int64_t lda, stride_a;
  const float* b;
  int64_t ldb, stride_b;
  float beta;
  float* c;
  int64_t ldc, stride_c;
};

// Checks o and runs it as one matmul on the calling thread (who names the caller in errors).
void run_strided(const Operands& o, const char* who) {
  const bool one = o.batch == 0;
  check(o.batch >= 0 && o.m >= 0 && o.n >= 0 && o.k >= 0, who, ": negative size ",
        one ? "" : std::to_string(o.batch) + " × ", "[", o.m, ", ", o.n, "] over ", o.k);
  check(o.beta == 0.0f || o.beta == 1.0f, who, ": beta = ", o.beta, " (0 or 1 only)");
  const int64_t entries = one ? 1 : o.batch;
  if (entries == 0 || o.m == 0 || o.n == 0) return;
  if (o.k == 0) {
    if (o.beta == 0.0f)
      for (int64_t e = 0; e < entries; ++e)
        for (int64_t i = 0; i < o.m; ++i) std::fill_n(o.c + e * o.stride_c + i * o.ldc, o.n, 0.0f);
    return;
  }
  check(o.a != nullptr && o.b != nullptr && o.c != nullptr, who, ": null A, B or C");
  check(o.lda >= (o.ta ? o.m : o.k) && o.ldb >= (o.tb ? o.k : o.n) && o.ldc >= o.n, who,
        ": lda = ", o.lda, ", ldb = ", o.ldb, " or ldc = ", o.ldc,
        " is less than the row length (m = ", o.m, ", n = ", o.n, ", k = ", o.k, ")");
  const auto desc = [&](int64_t rows, int64_t cols, int64_t ld, int64_t stride, bool trans) {
    return one ? onednn::strided(rows, cols, ld, trans) : batched(o.batch, rows, cols, ld, stride, trans);
  };
  const bool accumulate = o.beta == 1.0f;
  const onednn::Matmul& mm = onednn::cached_matmul(
      {one ? 1 : 2, o.ta, o.tb, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, accumulate, o.batch,
       o.stride_a, o.stride_b, o.stride_c},
      [&] {
        dnnl::primitive_attr attr = onednn::user_scratchpad();
        if (accumulate) {  // C += product
          dnnl::post_ops ops;
          ops.append_sum(1.0f);
          attr.set_post_ops(ops);
        }
        return dnnl::matmul::primitive_desc(
            dnnl::matmul::desc(desc(o.m, o.k, o.lda, o.stride_a, o.ta),
                               desc(o.k, o.n, o.ldb, o.stride_b, o.tb),
                               desc(o.m, o.n, o.ldc, o.stride_c, false)),
            attr, onednn::cpu_engine());
      },
      who);
  const dnnl::memory b_mem(desc(o.k, o.n, o.ldb, o.stride_b, o.tb), onednn::cpu_engine(),
                           const_cast<float*>(o.b));
  onednn::run_matmul(mm, o.a, b_mem, o.c, who);
}

}  // namespace

void sgemm_onednn(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  run_strided({ta, tb, 0, m, n, k, a, lda, 0, b, ldb, 0, beta, c, ldc, 0}, "sgemm_onednn");
}

void sgemm_batched_onednn(bool ta, bool tb, int64_t batch, int64_t m, int64_t n, int64_t k,
                          const float* a, int64_t lda, int64_t stride_a, const float* b,
                          int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                          int64_t stride_c) {
  if (batch == 0) return;  // (batch 0 means one product to run_strided)
  run_strided({ta, tb, batch, m, n, k, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c},
              "sgemm_batched_onednn");
}

#endif

}  // namespace attnkit
