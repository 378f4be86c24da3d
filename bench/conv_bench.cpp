// Google Benchmark: each convolution of the residual CNN (models/cnn.hpp, widths 32/64/128 on 28×28,
// batch 128) and of its CBAM spatial gate, one pass at a time (forward y, input gradient d_x,
// weight gradient d_w), by attnkit's built-in paths (im2col + sgemm, Winograd) and by oneDNN's
// convolution (Conv2dEngine::kOneDnn) in alternating calls within each iteration, so both see the
// same machine load. Counters per engine, from its fastest call (robust on a shared machine, where
// some calls stall): GFLOP/s (counted as direct convolution, 2·N·O·OH·OW·C·KH·KW per pass;
// Winograd executes fewer) and that rate as a fraction of the FMA peak measured in this process
// with the same threads (measure_fma_gflops, the best of its measurements before the first and
// after each benchmark); onednn_vs_builtin is the ratio of the fastest calls.
// With bf16:1 both run in the bf16 mixed-precision mode (the built-in column path on gemm_bf16,
// oneDNN's convolution with bf16 inputs); their frac_peak is still of the float32 FMA peak.
// Built without oneDNN, only the built-in counters are reported.
// Run: build/attnkit_bench --benchmark_filter=Conv2dPass   (OMP_NUM_THREADS sets the threads)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "attnkit/ops/gemm_bf16.hpp"
#include "attnkit/ops/matmul_precision.hpp"
#include "attnkit/tools/roofline.hpp"
#include "bench_peaks.hpp"

namespace attnkit {
namespace {

struct Layer {
  int64_t c, o, size, kernel;  // x [N, c, size, size], 'same' padding, stride 1
};

// The CNN's convolutions (stem, the two stages' 3×3 and 1×1 shortcut layers) and CBAM's 7×7
// spatial gate on both stages.
constexpr Layer kLayers[] = {{1, 32, 28, 3},  {32, 64, 14, 3}, {64, 64, 14, 3}, {32, 64, 14, 1},
                             {64, 128, 7, 3}, {128, 128, 7, 3}, {64, 128, 7, 1}, {2, 1, 14, 7},
                             {2, 1, 7, 7}};
constexpr int64_t kBatch = 128;

using bench::fma_peak;

void BM_Conv2dPass(benchmark::State& state) {
  const Layer l = kLayers[state.range(0)];
  const int pass = int(state.range(1));  // 0 forward, 1 d_x, 2 d_w
  const bool bf16 = state.range(2) == 1;
  if (bf16 && !gemm_bf16_available()) {
    state.SkipWithError(gemm_bf16_unavailable_reason().c_str());
    return;
  }
  const MatmulPrecisionScope precision(bf16 ? MatmulPrecision::kBf16 : MatmulPrecision::kF32);
  const int64_t n = kBatch, s = l.size, k = l.kernel;
  const Conv2dOptions opts{.stride = 1, .padding = k / 2};
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  auto filled = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& e : v) e = d(rng);
    return v;
  };
  std::vector<float> x = filled(n * l.c * s * s), w = filled(l.o * l.c * k * k), dy = filled(n * l.o * s * s);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size());
  const auto xv = ConstView4::contiguous(x.data(), {n, l.c, s, s});
  const auto wv = ConstView4::contiguous(w.data(), {l.o, l.c, k, k});
  const auto dyv = ConstView4::contiguous(dy.data(), {n, l.o, s, s});
  auto call = [&](Conv2dEngine e) {
    const Conv2dEngineScope scope(e);
    const double t0 = now_seconds();
    if (pass == 0) conv2d_forward(View4::contiguous(y.data(), {n, l.o, s, s}), xv, wv, {}, opts);
    if (pass == 1) conv2d_backward(View4::contiguous(dx.data(), {n, l.c, s, s}), {}, {}, dyv, xv, wv, opts);
    if (pass == 2) conv2d_backward({}, View4::contiguous(dw.data(), {l.o, l.c, k, k}), {}, dyv, xv, wv, opts);
    return now_seconds() - t0;
  };
  const bool onednn = conv2d_has_onednn();
  fma_peak(false);
  call(Conv2dEngine::kBuiltin);  // warm-up: scratch, and oneDNN's primitives for these shapes
  if (onednn) call(Conv2dEngine::kOneDnn);
  double t_builtin = 1e300, t_onednn = 1e300;
  int64_t calls = 0;
  for (auto _ : state) {  // the order alternates between iterations
    if (calls % 2 == 0) {
      t_builtin = std::min(t_builtin, call(Conv2dEngine::kBuiltin));
      if (onednn) t_onednn = std::min(t_onednn, call(Conv2dEngine::kOneDnn));
    } else {
      if (onednn) t_onednn = std::min(t_onednn, call(Conv2dEngine::kOneDnn));
      t_builtin = std::min(t_builtin, call(Conv2dEngine::kBuiltin));
    }
    ++calls;
  }
  const double peak = fma_peak(true);
  const double gflop = 2.0 * double(n * l.o * s * s) * double(l.c * k * k) * 1e-9;
  state.counters["builtin_GFLOP/s"] = gflop / t_builtin;
  state.counters["builtin_frac_peak"] = gflop / t_builtin / peak;
  if (onednn) {
    state.counters["onednn_GFLOP/s"] = gflop / t_onednn;
    state.counters["onednn_frac_peak"] = gflop / t_onednn / peak;
    state.counters["onednn_vs_builtin"] = t_builtin / t_onednn;
  }
  state.counters["fma_peak_GFLOP/s"] = peak;
}
BENCHMARK(BM_Conv2dPass)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8}, {0, 1, 2}, {0, 1}})
    ->ArgNames({"layer", "pass", "bf16"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace attnkit
