// Should conv2d use oneDNN's Winograd F(4×4, 3×3) (algorithm::convolution_winograd, avx512_core
// only) instead of attnkit's F(2×2, 3×3) on the CNN's 14×14 layers? Forward, 1 thread, batch 128
// in chunks of 8 images as conv2d_onednn.cpp runs them (NCHW reordered into oneDNN's layout and
// back, weights reordered once per call); best of 8 alternating calls each. Also prints each
// result's largest error against attnkit's float64 reference in units of u·Σ|x·w| (conv2d's
// test bar is C·9 + 2 such units).
//
// Build and run (from the checkout, after building build/libattnkit.a):
//   g++ -O2 -std=c++20 -fopenmp -Iinclude scripts/experiments/conv_winograd_probe.cpp build/libattnkit.a \
//     -ldnnl -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp \
//     -lopenblas -lhwy -lz -lstb -o /tmp/conv_winograd_probe && /tmp/conv_winograd_probe
#include <dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/conv2d.hpp"

using namespace dnnl;

// Seconds on a monotonic clock.
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main() {
  attnkit::set_num_threads(1); omp_set_num_threads(1);
  engine eng(engine::kind::cpu, 0); stream s(eng);
  struct L { int c, o, h; } ls[] = {{32, 64, 14}, {64, 64, 14}};
  for (auto l : ls) {
    const int N = 128, nb = 8;
    std::mt19937 rng(1); std::normal_distribution<float> d;
    std::vector<float> x(size_t(N) * l.c * l.h * l.h), w(size_t(l.o) * l.c * 9), y1(size_t(N) * l.o * l.h * l.h), y2(y1.size()), yr(y1.size()), ym(y1.size());
    for (auto& v : x) v = d(rng);
    for (auto& v : w) v = d(rng) * 0.3f;
    auto xv = attnkit::ConstView4::contiguous(x.data(), {N, l.c, l.h, l.h});
    auto wv = attnkit::ConstView4::contiguous(w.data(), {l.o, l.c, 3, 3});
    attnkit::Conv2dEngineScope be(attnkit::Conv2dEngine::kBuiltin);
    memory::desc src({nb, l.c, l.h, l.h}, memory::data_type::f32, memory::format_tag::any);
    memory::desc wei({l.o, l.c, 3, 3}, memory::data_type::f32, memory::format_tag::any);
    memory::desc dst({nb, l.o, l.h, l.h}, memory::data_type::f32, memory::format_tag::any);
    convolution_forward::desc cd(prop_kind::forward_training, algorithm::convolution_winograd, src, wei, dst, {1, 1}, {1, 1}, {1, 1});
    convolution_forward::primitive_desc pd(cd, eng); convolution_forward p(pd);
    memory::desc sp({nb, l.c, l.h, l.h}, memory::data_type::f32, memory::format_tag::nchw), dp({nb, l.o, l.h, l.h}, memory::data_type::f32, memory::format_tag::nchw), wp({l.o, l.c, 3, 3}, memory::data_type::f32, memory::format_tag::oihw);
    memory sb(pd.src_desc(), eng), db(pd.dst_desc(), eng), wb(pd.weights_desc(), eng);
    reorder rs(reorder::primitive_desc(eng, sp, eng, pd.src_desc()));
    reorder rd(reorder::primitive_desc(eng, pd.dst_desc(), eng, dp));
    auto run_dnnl = [&] {
      memory wu(wp, eng, w.data()); reorder(wu, wb).execute(s, wu, wb);
      for (int n0 = 0; n0 < N; n0 += nb) {
        memory xu(sp, eng, x.data() + size_t(n0) * l.c * l.h * l.h), yu(dp, eng, y2.data() + size_t(n0) * l.o * l.h * l.h);
        rs.execute(s, xu, sb);
        p.execute(s, {{DNNL_ARG_SRC, sb}, {DNNL_ARG_WEIGHTS, wb}, {DNNL_ARG_DST, db}});
        rd.execute(s, db, yu);
      }
      s.wait();
    };
    auto run_ak = [&] { attnkit::conv2d_forward(attnkit::View4::contiguous(y1.data(), {N, l.o, l.h, l.h}), xv, wv, {}, {1, 1}); };
    double ta = 1e9, td = 1e9;
    for (int r = 0; r < 8; ++r) {
      double t0 = now(); run_ak(); ta = std::min(ta, now() - t0);
      t0 = now(); run_dnnl(); td = std::min(td, now() - t0);
    }
    attnkit::conv2d_forward_reference(attnkit::View4::contiguous(yr.data(), {N, l.o, l.h, l.h}), xv, wv, {}, {1, 1});
    std::vector<float> ax(x), aw(w);
    for (auto& v : ax) v = std::fabs(v);
    for (auto& v : aw) v = std::fabs(v);
    attnkit::conv2d_forward_reference(attnkit::View4::contiguous(ym.data(), {N, l.o, l.h, l.h}), attnkit::ConstView4::contiguous(ax.data(), {N, l.c, l.h, l.h}), attnkit::ConstView4::contiguous(aw.data(), {l.o, l.c, 3, 3}), {}, {1, 1});
    double e1 = 0, e2 = 0; const double u = std::ldexp(1.0, -24);
    for (size_t i = 0; i < yr.size(); ++i) { e1 = std::max(e1, std::fabs(y1[i] - yr[i]) / (u * ym[i])); e2 = std::max(e2, std::fabs(y2[i] - yr[i]) / (u * ym[i])); }
    double fl = 2.0 * N * l.o * l.h * l.h * l.c * 9;
    std::printf("%d->%d @%d: attnkit %.1f GFLOP/s (max err %.1f u·Σ|terms|), oneDNN winograd+reorders %.1f GFLOP/s (max err %.1f), ratio %.2f; bar C*9+2 = %d\n",
                l.c, l.o, l.h, fl / ta * 1e-9, e1, fl / td * 1e-9, e2, ta / td, l.c * 9 + 2);
  }
}
