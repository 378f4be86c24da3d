#pragma once
// What serves attnkit's kernels in this process: threads and where their count comes from, the
// BLAS library file and kernel set, and the SIMD level the library was compiled for.
#include <string>

namespace attnkit {

struct BuildInfo {
  int threads = 1;              // num_threads(): parallel_for and sgemm
  std::string threads_source;   // "set_num_threads", "OMP_NUM_THREADS" or "CPU affinity"
  int blas_threads = 1;         // threads an sgemm called from this thread uses now
  std::string blas_library;     // path of the shared library serving sgemm
  std::string blas_kernels;     // OpenBLAS kernel set and how it was chosen
  std::string simd;             // instruction set the library was compiled for, e.g. "AVX-512"
  std::string compiler;         // compiler and version that built the library
};

// The current values (threads are read now, not when the library loaded).
BuildInfo build_info();

}  // namespace attnkit
