// Google Benchmark: multi-scale deformable attention (H = 8, Dh = 32, Lv = 4, P = 4; every token a
// query) against dense flash attention over the same N tokens. The argument is the finest level's
// side; N = Σ side_l² over the 4 halving levels is reported as a counter. Sampling locations as
// in `attnkit bench deformable` (near each query, Deformable DETR's initial pattern).
// Run: build/attnkit_bench --benchmark_filter='Deform|Dense'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "attnkit/attention/flash_attention.hpp"
#include "attnkit/attention/ms_deform_attn.hpp"
#include "attnkit/tools/deformable_bench.hpp"

namespace attnkit {
namespace {

constexpr int64_t kHeads = 8, kDh = 32, kLv = 4, kP = 4;

struct Problem {
  std::vector<int64_t> shapes, starts;
  int64_t n = 0;
  std::vector<float> value, loc, w, out, q, k, o, lse;
  explicit Problem(int64_t side) {
    for (int64_t l = 0; l < kLv; ++l) {
      const int64_t s = std::max<int64_t>(1, side >> l);
      shapes.insert(shapes.end(), {s, s});
      starts.push_back(n);
      n += s * s;
    }
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, int64_t count) {
      x.resize(static_cast<size_t>(count));
      for (auto& e : x) e = u(rng);
    };
    fill(value, n * kHeads * kDh), fill(w, n * kHeads * kLv * kP);
    loc = deformable_bench_locations(shapes, kHeads, kP, false, 2);  // near each query
    fill(q, n * kHeads * kDh), fill(k, n * kHeads * kDh);
    out.resize(value.size()), o.resize(value.size()), lse.resize(static_cast<size_t>(kHeads * n));
  }
  MsDeformAttnArgs deform() {
    MsDeformAttnArgs a;
    a.value = View<const float, 4>::contiguous(value.data(), {1, n, kHeads, kDh});
    a.spatial_shapes = shapes;
    a.level_start_index = starts;
    a.sampling_locations = View<const float, 6>::contiguous(loc.data(), {1, n, kHeads, kLv, kP, 2});
    a.attention_weights = View<const float, 5>::contiguous(w.data(), {1, n, kHeads, kLv, kP});
    a.out = View3::contiguous(out.data(), {1, n, kHeads * kDh});
    return a;
  }
  AttentionArgs dense() {
    return {.q = ConstView3::contiguous(q.data(), {n, kHeads, kDh}),
            .k = ConstView3::contiguous(k.data(), {n, kHeads, kDh}),
            .v = ConstView3::contiguous(value.data(), {n, kHeads, kDh}),
            .out = View3::contiguous(o.data(), {n, kHeads, kDh}),
            .lse = View2::contiguous(lse.data(), {kHeads, n})};
  }
};

void BM_DeformableForward(benchmark::State& state) {
  Problem p(state.range(0));
  const auto a = p.deform();
  for (auto _ : state) ms_deform_attn(a);
  state.counters["N"] = double(p.n);
}

void BM_DenseFlashForward(benchmark::State& state) {
  Problem p(state.range(0));
  const auto a = p.dense();
  for (auto _ : state) flash_attention(AttentionOptions{}, a);
  state.counters["N"] = double(p.n);
}

BENCHMARK(BM_DeformableForward)->Arg(8)->Arg(16)->Arg(32)->Arg(64)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DenseFlashForward)->Arg(8)->Arg(16)->Arg(32)->Arg(64)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace attnkit
