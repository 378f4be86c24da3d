// build_info(): threads, BLAS library and kernels, and compile-time SIMD level of this process.
#include "attnkit/tools/build_info.hpp"

#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"

namespace attnkit {
namespace {

const char* compiled_simd() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  return "AVX-512 (F/BW/VL)";
#elif defined(__AVX2__) && defined(__FMA__)
  return "AVX2 + FMA";
#elif defined(__AVX__)
  return "AVX";
#else
  return "SSE2";
#endif
}

}  // namespace

BuildInfo build_info() {
  BuildInfo b;
  b.threads = num_threads();
  b.threads_source = num_threads_source();
  b.blas_threads = blas_threads();
  b.blas_library = blas_library();
  b.blas_kernels = blas_kernels();
  b.simd = compiled_simd();
#if defined(__clang__)
  b.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  b.compiler = "g++ " __VERSION__;
#else
  b.compiler = "unknown";
#endif
  return b;
}

}  // namespace attnkit
