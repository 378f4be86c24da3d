// Google Benchmark: one training step (forward in training mode + backward, no optimizer) and
// one evaluation forward of the deformable classifier (models/deformable_classifier.hpp) with the
// default config on 28×28 images; the argument is the batch size, images/s is reported.
// Run: build/attnkit_bench --benchmark_filter=DeformableClassifier
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "attnkit/models/deformable_classifier.hpp"

namespace attnkit {
namespace {

struct Setup {
  DeformableClassifier model{DeformableConfig{}};
  std::vector<float> x, d_logits;
  int64_t n;
  explicit Setup(int64_t batch) : n(batch) {
    model.init_random(1);
    std::mt19937 rng(2);
    std::normal_distribution<float> d(0.0f, 1.0f);
    x.resize(size_t(n * 28 * 28));
    for (float& v : x) v = d(rng);
    d_logits.resize(size_t(n * 10));
    for (float& v : d_logits) v = d(rng) / float(n);
  }
  ConstView4 images() const { return ConstView4::contiguous(x.data(), {n, 1, 28, 28}); }
};

void BM_DeformableClassifierTrainStep(benchmark::State& state) {
  Setup s(state.range(0));
  s.model.set_training(true);
  for (auto _ : state) {
    benchmark::DoNotOptimize(s.model.forward(s.images()).data);
    s.model.backward(ConstView2::contiguous(s.d_logits.data(), {s.n, 10}));
  }
  state.counters["images/s"] =
      benchmark::Counter(double(s.n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DeformableClassifierTrainStep)->Arg(32)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DeformableClassifierEvalForward(benchmark::State& state) {
  Setup s(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(s.model.forward(s.images()).data);
  state.counters["images/s"] =
      benchmark::Counter(double(s.n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DeformableClassifierEvalForward)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace attnkit
