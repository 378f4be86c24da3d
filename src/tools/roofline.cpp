// Roofline probes: an FMA throughput loop, a streaming read, and OpenBLAS sgemm.
#include "attnkit/tools/roofline.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/huge_pages.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"
#include "attnkit/ops/gemm_onednn.hpp"
#include "attnkit/tools/decode_bench.hpp"
#include "hwy/highway.h"

namespace attnkit {
namespace hn = hwy::HWY_NAMESPACE;

namespace {

// unique_ptr deleter for a huge_page_alloc block of `bytes`.
struct HugePageFree {
  size_t bytes;
  void operator()(float* p) const noexcept { huge_page_free(p, bytes); }
};

// 2·lanes·12·iters flops; 12 independent chains hide the FMA latency (4 cycles × 2 ports + slack).
float fma_chains(int64_t iters, float seed) {
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 0.999999f), a = hn::Set(d, 1e-7f);
  auto x0 = hn::Set(d, seed), x1 = hn::Set(d, seed + 1), x2 = hn::Set(d, seed + 2),
       x3 = hn::Set(d, seed + 3), x4 = hn::Set(d, seed + 4), x5 = hn::Set(d, seed + 5),
       x6 = hn::Set(d, seed + 6), x7 = hn::Set(d, seed + 7), x8 = hn::Set(d, seed + 8),
       x9 = hn::Set(d, seed + 9), x10 = hn::Set(d, seed + 10), x11 = hn::Set(d, seed + 11);
  for (int64_t i = 0; i < iters; ++i) {
    x0 = hn::MulAdd(x0, m, a); x1 = hn::MulAdd(x1, m, a); x2 = hn::MulAdd(x2, m, a);
    x3 = hn::MulAdd(x3, m, a); x4 = hn::MulAdd(x4, m, a); x5 = hn::MulAdd(x5, m, a);
    x6 = hn::MulAdd(x6, m, a); x7 = hn::MulAdd(x7, m, a); x8 = hn::MulAdd(x8, m, a);
    x9 = hn::MulAdd(x9, m, a); x10 = hn::MulAdd(x10, m, a); x11 = hn::MulAdd(x11, m, a);
  }
  auto s = hn::Add(hn::Add(hn::Add(x0, x1), hn::Add(x2, x3)), hn::Add(hn::Add(x4, x5), hn::Add(x6, x7)));
  s = hn::Add(s, hn::Add(hn::Add(x8, x9), hn::Add(x10, x11)));
  return hn::GetLane(hn::SumOfLanes(d, s));
}

}  // namespace

double measure_fma_gflops(int threads) {
  const int64_t iters = 20'000'000;
  const double lanes = double(hn::Lanes(hn::ScalableTag<float>()));
  volatile float sink = 0;
  ThreadCountScope scope(threads);
  std::vector<float> partial(static_cast<size_t>(threads));
  const double t = best_of(3, [&] {
    parallel_for(threads, [&](int64_t i) { partial[size_t(i)] = fma_chains(iters, float(i)); });
    sink = partial[0];
  });
  return 2.0 * lanes * 12.0 * double(iters) * threads / t * 1e-9;
}

double measure_read_gbps(int threads, int64_t bytes, int streams) {
  // Each thread reads one contiguous slice as `streams` equal parts in lockstep, 4 vectors of each
  // in turn (a decode work item, too, reads several forward streams: K, then V, a sub-block of
  // every head at a time), summing into four independent accumulators; the data is first touched
  // by the thread that reads it. One sequential stream per core measures the depth of the
  // hardware prefetcher's stream, not the memory: on an Intel Xeon (KVM, 1 thread, same process
  // and minute) 1 stream read 11.5 GB/s, 4 streams 15.6 and the MHA decode kernel 13.8.
  check(threads >= 1 && streams >= 1, "measure_read_gbps: threads = ", threads, " and streams = ",
        streams, " must be at least 1");
  const int64_t kStreams = streams;
  if (bytes <= 0) bytes = std::max(int64_t(512) << 20, 2 * last_level_cache_bytes());
  const hn::ScalableTag<float> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  const int64_t part = bytes / int64_t(sizeof(float)) / threads / kStreams / 4096 * 4096;
  check(part > 0, "measure_read_gbps: ", bytes, " bytes is less than 16 KiB per stream and thread");
  const int64_t per = kStreams * part;
  ThreadCountScope scope(threads);
  // Huge pages, and no zeroing before the fill (the fill is the first touch): on a VM whose page
  // faults are slow, zeroing 512 MiB in 4 KiB pages took longer than the probe's reads.
  const size_t data_bytes = size_t(per * threads) * sizeof(float);
  const std::unique_ptr<float, HugePageFree> data(static_cast<float*>(huge_page_alloc(data_bytes)),
                                                  HugePageFree{data_bytes});
  std::vector<float> partial(static_cast<size_t>(threads));
  parallel_for(threads, [&](int64_t w) {
    for (int64_t i = w * per; i < (w + 1) * per; ++i) data.get()[i] = float(i & 1023);
  });
  volatile float sink = 0;
  const double t = best_of(5, [&] {
    parallel_for(threads, [&](int64_t w) {
      auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
      const float* p = data.get() + w * per;
      for (int64_t j = 0; j < part; j += 4 * lanes)
        for (int64_t s = 0; s < kStreams; ++s) {
          const float* x = p + s * part + j;
          a0 = hn::Add(a0, hn::Load(d, x));
          a1 = hn::Add(a1, hn::Load(d, x + lanes));
          a2 = hn::Add(a2, hn::Load(d, x + 2 * lanes));
          a3 = hn::Add(a3, hn::Load(d, x + 3 * lanes));
        }
      partial[size_t(w)] = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
    });
    sink = partial[0];
  });
  return double(per * threads) * sizeof(float) / t * 1e-9;
}

double measure_sgemm_gflops(int threads, int64_t n) {
  std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size());
  BlasThreadsScope blas(threads);
  const SgemmPathScope openblas(SgemmPath::kOpenBlas);  // the OpenBLAS rate at 1 thread too
  sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm-up
  const double t = best_of(3, [&] {
    sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * double(n) * double(n) * double(n) / t * 1e-9;
}

}  // namespace attnkit
