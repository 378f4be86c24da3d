// attnkit's thread counts do not follow OpenMP's global default, which other libraries in the
// process change (importing PyTorch sets it to 1), and sgemm restores the caller's OpenMP value.
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"

namespace attnkit {
namespace {

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

TEST(Threads, DefaultIsTheAffinityOrOmpNumThreadsNotOpenMpsRuntimeValue) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);  // what another library may do
  const std::string source = num_threads_source();
  if (std::getenv("OMP_NUM_THREADS")) {
    EXPECT_EQ(source, "OMP_NUM_THREADS");
    EXPECT_EQ(num_threads(), std::atoi(std::getenv("OMP_NUM_THREADS")));
  } else {
    EXPECT_EQ(source, "CPU affinity");
    EXPECT_EQ(num_threads(), affinity_cpus());
  }
  omp_set_num_threads(saved);
}

TEST(Threads, SetNumThreadsWinsAndIsBounded) {
  {
    ThreadCountScope scope(3);
    EXPECT_EQ(num_threads(), 3);
    EXPECT_STREQ(num_threads_source(), "set_num_threads");
  }
  {
    ThreadCountScope scope(1 << 20);
    EXPECT_EQ(num_threads(), kMaxThreads);
  }
  EXPECT_STRNE(num_threads_source(), "set_num_threads");
}

TEST(Threads, ParallelForUsesItsOwnCountWhateverOpenMpsDefault) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  ThreadCountScope scope(2);
  std::vector<int> seen(64, -1);
  parallel_for(64, [&](int64_t i) { seen[size_t(i)] = omp_get_num_threads(); });
  for (int t : seen) EXPECT_EQ(t, 2);
  omp_set_num_threads(saved);
}

TEST(Threads, SgemmUsesAttnkitsCountAndRestoresTheCallersOpenMpValue) {
  EXPECT_EQ(blas_threads(), num_threads());
  {
    BlasThreadsScope one(1);
    EXPECT_EQ(blas_threads(), 1);
    {
      BlasThreadsScope three(3);
      EXPECT_EQ(blas_threads(), 3);
    }
    EXPECT_EQ(blas_threads(), 1);
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const int64_t n = 96;
  std::vector<float> a(n * n, 1.0f), b(n * n, 2.0f), c(n * n, 0.0f);
  sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  EXPECT_EQ(c[0], 2.0f * float(n));
  EXPECT_EQ(omp_get_max_threads(), 1);  // the caller's value is back
  omp_set_num_threads(saved);
  int inside = -1;
  ThreadCountScope two(2);
  parallel_for(2, [&](int64_t i) {
    if (i == 0) inside = blas_threads();
  });
  if (num_threads() > 1) {  // never nested BLAS threads
    EXPECT_EQ(inside, 1);
  }
}

TEST(Threads, BlasLibraryIsNamed) {
  const std::string lib = blas_library();
  EXPECT_NE(lib, "unknown");
  EXPECT_NE(lib.find("blas"), std::string::npos) << lib;
}

}  // namespace
}  // namespace attnkit
