// Google Benchmark: LayerNorm and RMSNorm forward and backward (with parameter gradients and a
// residual gradient, as the pre-norm models call them) on the models' shapes: T = 2048 tokens
// of C = 96 (the ViT) and C = 256 (the GPT preset small). Counters: GB/s of the tensors each
// pass must read and write, and its fraction of the read bandwidth measured once in this process
// (the tensors, 0.8–2 MiB each, mostly stay in the L2/L3 caches, so the fraction can exceed 1).
// Run: build/attnkit_bench --benchmark_filter=Norm
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/norm.hpp"
#include "attnkit/tools/roofline.hpp"

namespace attnkit {
namespace {

double norm_read_rate() {
  static const double rate = measure_read_gbps(num_threads());
  return rate;
}

struct NormData {
  int64_t t, c;
  std::vector<float> x, y, dy, dx, res, w, b, dw, db, mean, rstd;
  NormData(int64_t tokens, int64_t channels) : t(tokens), c(channels) {
    std::mt19937 rng(1);
    std::normal_distribution<float> n01;
    auto fill = [&](std::vector<float>& v, int64_t n) {
      v.resize(size_t(n));
      for (auto& e : v) e = n01(rng);
    };
    fill(x, t * c), fill(dy, t * c), fill(res, t * c), fill(w, c), fill(b, c);
    y.resize(x.size()), dx.resize(x.size()), dw.resize(size_t(c)), db.resize(size_t(c));
    mean.resize(size_t(t)), rstd.resize(size_t(t));
  }
  View2 m(std::vector<float>& v) { return View2::contiguous(v.data(), {t, c}); }
  ConstView2 cm(const std::vector<float>& v) const { return ConstView2::contiguous(v.data(), {t, c}); }
};

void report_norm(benchmark::State& state, double bytes) {
  using benchmark::Counter;
  state.counters["GB/s"] = Counter(bytes * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["frac_read_bw"] = Counter(bytes * 1e-9 / norm_read_rate(), Counter::kIsIterationInvariantRate);
}

void BM_LayerNormForward(benchmark::State& state) {
  NormData d(2048, state.range(0));
  for (auto _ : state) layer_norm_forward(d.m(d.y), d.mean, d.rstd, d.cm(d.x), d.w, d.b, 1e-5f);
  report_norm(state, 2.0 * 4 * double(d.t * d.c));  // x in, y out
}

void BM_LayerNormBackward(benchmark::State& state) {
  NormData d(2048, state.range(0));
  layer_norm_forward(d.m(d.y), d.mean, d.rstd, d.cm(d.x), d.w, d.b, 1e-5f);
  for (auto _ : state)
    layer_norm_backward(d.m(d.dx), d.dw, d.db, d.cm(d.dy), d.cm(d.x), d.w, d.mean, d.rstd,
                        d.cm(d.res));
  report_norm(state, 4.0 * 4 * double(d.t * d.c));  // x, d_y, d_residual in, d_x out
}

void BM_RmsNormBackward(benchmark::State& state) {
  NormData d(2048, state.range(0));
  rms_norm_forward(d.m(d.y), d.rstd, d.cm(d.x), d.w, 1e-5f);
  for (auto _ : state)
    rms_norm_backward(d.m(d.dx), d.dw, d.cm(d.dy), d.cm(d.x), d.w, d.rstd, d.cm(d.res));
  report_norm(state, 4.0 * 4 * double(d.t * d.c));
}

BENCHMARK(BM_LayerNormForward)->Arg(96)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_LayerNormBackward)->Arg(96)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_RmsNormBackward)->Arg(96)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace attnkit
