// Can this machine stream memory and compute at the same time? A decode-shaped probe: each thread
// reads f16 data from cold memory (64 MiB per pass, 512 MiB cycled), converts every 8 halves to
// float32 and does 2·reps FMAs on them (reps = 2 is GQA with G = 4: scores and P·V each use every
// cached element G times), prefetching `pf` bytes ahead. Prints the median pass time, GB/s read and
// GFLOP/s. Compare with `attnkit bench decode`: if the probe reads at the full bandwidth at the
// same flops per byte, the decode kernel (not the machine) is what leaves bandwidth unused.
//
// ORDER=headmajor reads each 16 KiB block in the order the decode kernels do (8 tokens × 8 KV
// heads × 256-byte rows: for each head, its 8 rows), prefetching the same head's rows ahead;
// ORDER=headmajor-seqpf reads that order but prefetches in address order.
//
// Build and run (AVX2 + F16C):
//   g++ -O3 -march=native -fopenmp scripts/experiments/decode_overlap_probe.cpp -o /tmp/probe
//   for r in 0 1 2 4; do /tmp/probe $r 24576; ORDER=headmajor /tmp/probe $r 24576; done
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// Index (in halves) of the line read at step i (halves, multiple of 32) of a pass.
size_t line_at(size_t i, bool head_major) {
  if (!head_major) return i;
  const size_t block = i / 8192 * 8192, line = i % 8192 / 32;  // 16 KiB blocks, 256 lines each
  const size_t head = line / 32, token = line / 4 % 8, col = line % 4;
  return block + token * 1024 + head * 128 + col * 32;  // rows of 2 KiB: 8 heads × 256 B
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s REPS PREFETCH_BYTES [THREADS]\n", argv[0]);
    return 2;
  }
  const int reps = std::atoi(argv[1]);
  const long pf = std::atol(argv[2]);
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const std::string order = std::getenv("ORDER") ? std::getenv("ORDER") : "sequential";
  const bool head_major = order.rfind("headmajor", 0) == 0, seq_pf = order == "headmajor-seqpf";
  const size_t bytes = size_t(64) << 20;
  const int buffers = 8;
  std::vector<uint16_t*> buf;
  for (int b = 0; b < buffers; ++b) {
    void* p = nullptr;
    if (posix_memalign(&p, size_t(2) << 20, bytes) != 0) return 1;
    madvise(p, bytes, MADV_HUGEPAGE);
    std::memset(p, 0x3c, bytes);  // f16 1.0-ish everywhere
    buf.push_back(static_cast<uint16_t*>(p));
  }
  std::vector<double> times;
  float sink = 0;
  for (int pass = 0; pass < 24; ++pass) {
    const uint16_t* data = buf[pass % buffers];
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const size_t n = bytes / 2 / omp_get_num_threads();
      const uint16_t* p = data + omp_get_thread_num() * n;
      const char* end = reinterpret_cast<const char*>(p + n);
      __m256 acc[8];
      for (auto& a : acc) a = _mm256_setzero_ps();
      const __m256 q = _mm256_set1_ps(1.0001f);
      for (size_t i = 0; i < n; i += 32) {  // one 64-byte line: 4 vectors of 8 halves
        const size_t e = line_at(i, head_major);
        const char* ahead = reinterpret_cast<const char*>(p + (seq_pf ? i : e)) + pf;
        if (pf && ahead < end) __builtin_prefetch(ahead, 0, 2);
        __m256 x[4];
        for (int j = 0; j < 4; ++j)
          x[j] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p + e + 8 * j)));
        for (int r = 0; r < reps; ++r) {
          for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(q, x[j], acc[j]);
          for (int j = 0; j < 4; ++j) acc[4 + j] = _mm256_fmadd_ps(x[j], q, acc[4 + j]);
          asm("" : "+x"(x[0]), "+x"(x[1]), "+x"(x[2]), "+x"(x[3]));  // keep every FMA
        }
      }
      __m256 s = acc[0];
      for (int j = 1; j < 8; ++j) s = _mm256_add_ps(s, acc[j]);
      total += _mm256_cvtss_f32(s);
    }
    sink += total;
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin() + 8, times.end());  // the first 8 passes are warm-up
  const double t = times[16];                  // median of the last 16
  const double flops = bytes / 64.0 * reps * 8 * 16;
  std::printf("%s reps %d prefetch %ld threads %d: %.2f ms  %.1f GB/s  %.1f GFLOP/s%s\n",
              order.c_str(), reps, pf, threads, t * 1e3, bytes / t / 1e9, flops / t / 1e9,
              sink == 12345.0f ? " " : "");
}
