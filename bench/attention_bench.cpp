// Google Benchmark: flash attention forward/backward and the naive path, H = 32, Hkv = 8,
// D = 128, causal; and flash on a ViT's many short sequences. Counters: GFLOP/s of unmasked work
// and its fraction of OpenBLAS sgemm measured once in this process (same threads). Run: build/attnkit_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "attnkit/attention/attention_naive.hpp"
#include "attnkit/attention/flash_attention.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/tools/roofline.hpp"
#include "bench_peaks.hpp"

namespace attnkit {
namespace {

constexpr int64_t kH = 32, kHkv = 8, kD = 128;

using bench::sgemm_rate;

struct Data {
  int64_t l;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  explicit Data(int64_t len) : l(len) {
    std::mt19937 rng(1);
    std::normal_distribution<float> n01;
    auto fill = [&](std::vector<float>& x, int64_t n) {
      x.resize(static_cast<size_t>(n));
      for (auto& e : x) e = n01(rng);
    };
    fill(q, l * kH * kD), fill(k, l * kHkv * kD), fill(v, l * kHkv * kD), fill(dout, l * kH * kD);
    out.resize(q.size()), lse.resize(static_cast<size_t>(kH * l));
    dq.resize(q.size()), dk.resize(k.size()), dv.resize(v.size());
  }
  AttentionArgs args() {
    return {.q = ConstView3::contiguous(q.data(), {l, kH, kD}),
            .k = ConstView3::contiguous(k.data(), {l, kHkv, kD}),
            .v = ConstView3::contiguous(v.data(), {l, kHkv, kD}),
            .out = View3::contiguous(out.data(), {l, kH, kD}),
            .lse = View2::contiguous(lse.data(), {kH, l})};
  }
  AttentionGrads grads() {
    return {.d_out = ConstView3::contiguous(dout.data(), {l, kH, kD}),
            .d_q = View3::contiguous(dq.data(), {l, kH, kD}),
            .d_k = View3::contiguous(dk.data(), {l, kHkv, kD}),
            .d_v = View3::contiguous(dv.data(), {l, kHkv, kD})};
  }
  double causal_flops(double per_pair) const {  // unmasked (query, key) pairs × heads
    return per_pair * kD * double(l) * double(l + 1) / 2 * kH;
  }
};

// GFLOP/s of `flops` per iteration, and the same rate as a fraction of sgemm (both are rates,
// so Google Benchmark divides them by the measured time per iteration).
void report(benchmark::State& state, double flops) {
  using benchmark::Counter;
  state.counters["GFLOP/s"] = Counter(flops * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["frac_sgemm"] = Counter(flops * 1e-9 / sgemm_rate(), Counter::kIsIterationInvariantRate);
  state.counters["sgemm_GFLOP/s"] = sgemm_rate();
}

void BM_FlashForwardCausal(benchmark::State& state) {
  Data d(state.range(0));
  auto a = d.args();
  for (auto _ : state) flash_attention(AttentionOptions::causal(), a);
  report(state, d.causal_flops(4));
}

void BM_FlashBackwardCausal(benchmark::State& state) {
  Data d(state.range(0));
  auto a = d.args();
  flash_attention(AttentionOptions::causal(), a);
  for (auto _ : state) flash_attention_backward(AttentionOptions::causal(), a, d.grads());
  report(state, d.causal_flops(10));
}

void BM_NaiveForwardCausal(benchmark::State& state) {
  Data d(state.range(0));
  auto a = d.args();
  a.lse = {};
  for (auto _ : state) attention_naive(AttentionOptions::causal(), a);
  report(state, d.causal_flops(4));
}

// A ViT's attention (patch 7 on 28 × 28 images, mean pooling): 128 sequences of 16 tokens, H = 4,
// D = 24, non-causal, q/k/v read in place from one [T, 3·H·D] projection as the model does.
struct ShortSequences {
  static constexpr int64_t kB = 128, kL = 16, kHeads = 4, kDim = 24, kT = kB * kL;
  std::vector<float> qkv, out, lse, dout, dq, dk, dv;
  std::vector<int32_t> cu;
  ShortSequences() {
    std::mt19937 rng(1);
    std::normal_distribution<float> n01;
    qkv.resize(size_t(kT * 3 * kHeads * kDim));
    dout.resize(size_t(kT * kHeads * kDim));
    for (auto& e : qkv) e = n01(rng);
    for (auto& e : dout) e = n01(rng);
    out.resize(dout.size()), dq.resize(dout.size()), dk.resize(dout.size()), dv.resize(dout.size());
    lse.resize(size_t(kHeads * kT));
    for (int64_t b = 0; b <= kB; ++b) cu.push_back(int32_t(b * kL));
  }
  AttentionArgs args() {
    const int64_t c = kHeads * kDim;
    auto part = [&](int64_t i) {
      return ConstView3{qkv.data() + i * c, {kT, kHeads, kDim}, {3 * c, kDim, 1}};
    };
    AttentionArgs a;
    a.q = part(0), a.k = part(1), a.v = part(2);
    a.cu_seqlens_q = a.cu_seqlens_k = cu;
    a.out = View3::contiguous(out.data(), {kT, kHeads, kDim});
    a.lse = View2::contiguous(lse.data(), {kHeads, kT});
    return a;
  }
  AttentionGrads grads() {
    AttentionGrads g;
    g.d_out = ConstView3::contiguous(dout.data(), {kT, kHeads, kDim});
    g.d_q = View3::contiguous(dq.data(), {kT, kHeads, kDim});
    g.d_k = View3::contiguous(dk.data(), {kT, kHeads, kDim});
    g.d_v = View3::contiguous(dv.data(), {kT, kHeads, kDim});
    return g;
  }
  static double flops(double per_pair) { return per_pair * kDim * double(kL * kL) * kHeads * kB; }
};

void BM_FlashForwardShortSequences(benchmark::State& state) {
  ShortSequences d;
  auto a = d.args();
  for (auto _ : state) flash_attention(AttentionOptions{}, a);
  report(state, d.flops(4));
}

void BM_FlashBackwardShortSequences(benchmark::State& state) {
  ShortSequences d;
  auto a = d.args();
  flash_attention(AttentionOptions{}, a);
  for (auto _ : state) flash_attention_backward(AttentionOptions{}, a, d.grads());
  report(state, d.flops(10));
}

BENCHMARK(BM_FlashForwardCausal)->Arg(256)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FlashBackwardCausal)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_NaiveForwardCausal)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FlashForwardShortSequences)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FlashBackwardShortSequences)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace attnkit
