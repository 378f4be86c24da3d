// Google Benchmark: the three products of each GPT-small linear layer (T = 2048 tokens: batch 8 ×
// 256; qkv 256 → 384, o 256 → 256, gate/up 256 → 688, down 688 → 256), forward y = x·Wᵀ,
// d_x = d_y·W and d_W += d_yᵀ·x, through linear_forward / linear_backward in float32 (sgemm tiles)
// and in the bf16 mode (gemm_bf16: oneDNN on AMX or AVX512-BF16, the f32 → bf16 conversion of
// both operands included), in alternating calls within each iteration so both see the same
// machine load. Counters from each precision's fastest call (robust on a shared machine):
// GFLOP/s (2·T·in·out per product), the float32 rate as a fraction of the FMA peak measured in
// this process with the same threads, and bf16_vs_f32, the ratio of the fastest calls.
// Without bf16 (gemm_bf16_available() false) only the float32 counters are reported.
// Run: build/attnkit_bench --benchmark_filter=LinearBf16   (OMP_NUM_THREADS sets the threads)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "attnkit/core/clock.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/ops/gemm_bf16.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "attnkit/tools/roofline.hpp"
#include "bench_peaks.hpp"

namespace attnkit {
namespace {

struct Shape {
  int64_t in, out;
};
constexpr Shape kShapes[] = {{256, 384}, {256, 256}, {256, 688}, {688, 256}};
constexpr int64_t kTokens = 2048;

using bench::fma_peak;

void BM_LinearBf16(benchmark::State& state) {
  const Shape sh = kShapes[state.range(0)];
  const int pass = int(state.range(1));  // 0 forward, 1 d_x, 2 d_W
  const int64_t t = kTokens;
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  auto filled = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& e : v) e = d(rng);
    return v;
  };
  std::vector<float> x = filled(t * sh.in), w = filled(sh.out * sh.in), dy = filled(t * sh.out);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size());
  const auto xv = ConstView2::contiguous(x.data(), {t, sh.in});
  const auto wv = ConstView2::contiguous(w.data(), {sh.out, sh.in});
  const auto dyv = ConstView2::contiguous(dy.data(), {t, sh.out});
  auto call = [&](MatmulPrecision p) {
    const MatmulPrecisionScope scope(p);
    const double t0 = now_seconds();
    if (pass == 0) linear_forward(View2::contiguous(y.data(), {t, sh.out}), xv, wv, {});
    if (pass == 1) linear_backward(View2::contiguous(dx.data(), {t, sh.in}), {}, {}, dyv, xv, wv);
    if (pass == 2) linear_backward({}, View2::contiguous(dw.data(), {sh.out, sh.in}), {}, dyv, xv, wv);
    return now_seconds() - t0;
  };
  const bool bf16 = gemm_bf16_available();
  fma_peak(false);
  call(MatmulPrecision::kF32);  // warm-up: scratch, and oneDNN's primitives for this shape
  if (bf16) call(MatmulPrecision::kBf16);
  double t_f32 = 1e300, t_bf16 = 1e300;
  int64_t calls = 0;
  for (auto _ : state) {  // the order alternates between iterations
    if (calls % 2 == 0) {
      t_f32 = std::min(t_f32, call(MatmulPrecision::kF32));
      if (bf16) t_bf16 = std::min(t_bf16, call(MatmulPrecision::kBf16));
    } else {
      if (bf16) t_bf16 = std::min(t_bf16, call(MatmulPrecision::kBf16));
      t_f32 = std::min(t_f32, call(MatmulPrecision::kF32));
    }
    ++calls;
  }
  const double peak = fma_peak(true);
  const double gflop = 2.0 * double(t) * double(sh.in) * double(sh.out) * 1e-9;
  state.counters["f32_GFLOP/s"] = gflop / t_f32;
  state.counters["f32_frac_peak"] = gflop / t_f32 / peak;
  if (bf16) {
    state.counters["bf16_GFLOP/s"] = gflop / t_bf16;
    state.counters["bf16_vs_f32"] = t_f32 / t_bf16;
  }
  state.counters["fma_peak_GFLOP/s"] = peak;
}
BENCHMARK(BM_LinearBf16)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2}})
    ->ArgNames({"shape", "pass"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace attnkit
