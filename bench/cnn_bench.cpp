// Google Benchmark: one training step (forward in training mode + backward, no optimizer) of the
// residual CNN (models/cnn.hpp, widths 32/64/128 on 28×28 images) with attention none / SE /
// CBAM (second argument 0 / 1 / 2); the first argument is the batch size. Counters: images/s, the
// convolutions' GFLOP/s (forward, d_x and d_w work counted as direct convolution, so layers run by
// Winograd, which does up to 2.25× fewer multiplies, count more than they execute; the rest of the
// step is not counted) and that rate as a fraction of OpenBLAS sgemm measured once in this process
// with the same threads.
// Run: build/attnkit_bench --benchmark_filter=Cnn   (OMP_NUM_THREADS sets the threads)
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/models/cnn.hpp"
#include "attnkit/tools/roofline.hpp"
#include "bench_peaks.hpp"

namespace attnkit {
namespace {

using bench::sgemm_rate;

// Multiply-add flops of one image's convolutions in a training step: 3× the forward (forward,
// d_x, d_w), except the stem, whose input needs no gradient (2×).
double conv_flops_per_image(const CnnConfig& c) {
  int64_t s = c.image_size;
  double total = 2.0 * 2 * c.widths[0] * c.num_channels * 9 * s * s;  // stem
  s /= 2;
  for (size_t i = 1; i < c.widths.size(); ++i) {
    const double in = double(c.widths[i - 1]), out = double(c.widths[i]), px = double(s * s);
    double fwd = 2 * out * in * 9 * px + 2 * out * out * 9 * px;
    if (c.widths[i] != c.widths[i - 1]) fwd += 2 * out * in * px;  // 1×1 shortcut
    total += 3 * fwd;
    if (i + 1 < c.widths.size()) s /= 2;
  }
  return total;
}

void BM_CnnTrainStep(benchmark::State& state) {
  const int64_t n = state.range(0);
  CnnConfig cfg;
  cfg.attention = state.range(1) == 0   ? ChannelAttention::kNone
                  : state.range(1) == 1 ? ChannelAttention::kSe
                                        : ChannelAttention::kCbam;
  CnnModel model(cfg);
  model.init_random(1);
  model.set_training(true);
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(size_t(n * 28 * 28)), d_logits(size_t(n * 10));
  for (float& v : x) v = d(rng);
  for (float& v : d_logits) v = d(rng) / float(n);
  const auto images = ConstView4::contiguous(x.data(), {n, 1, 28, 28});
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.forward(images).data);
    model.backward(ConstView2::contiguous(d_logits.data(), {n, 10}));
  }
  using benchmark::Counter;
  const double flops = conv_flops_per_image(cfg) * double(n);
  state.counters["images/s"] = Counter(double(n), Counter::kIsIterationInvariantRate);
  state.counters["conv_GFLOP/s"] = Counter(flops * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["conv_frac_sgemm"] = Counter(flops * 1e-9 / sgemm_rate(), Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CnnTrainStep)
    ->ArgsProduct({{128}, {0, 1, 2}})
    ->ArgNames({"batch", "attention"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace attnkit
