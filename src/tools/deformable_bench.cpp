// `attnkit bench deformable`: multi-scale deformable attention against flash attention over the
// same N tokens (encoder self-attention: every token is a query), with random inputs. Times are
// best-of-repeats wall clock, each repeat looping a call for at least min_seconds.
#include "attnkit/tools/deformable_bench.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "attnkit/attention/flash_attention.hpp"
#include "attnkit/attention/ms_deform_attn.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/tools/roofline.hpp"

namespace attnkit {
namespace {

std::vector<float> uniform_floats(int64_t n, uint32_t seed, float lo, float hi) {
  std::vector<float> x(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (auto& v : x) v = dist(rng);
  return x;
}

// Best over `repeats` of the mean time per call (ms) of f looped for >= min_seconds; one warm-up.
template <class F>
double time_ms(const DeformableBenchConfig& c, F&& f) {
  f();
  double best = 1e300;
  for (int r = 0; r < c.repeats; ++r) {
    int64_t calls = 0;
    const double t0 = now_seconds();
    double t = t0;
    do {
      f();
      ++calls;
      t = now_seconds();
    } while (t - t0 < c.min_seconds);
    best = std::min(best, (t - t0) * 1e3 / double(calls));
  }
  return best;
}

struct Pyramid {
  std::vector<int64_t> shapes, starts;
  int64_t n = 0;
};

Pyramid pyramid(int64_t side, int64_t levels) {
  Pyramid p;
  for (int64_t l = 0; l < levels; ++l) {
    const int64_t s = std::max<int64_t>(1, side >> l);
    p.shapes.push_back(s);
    p.shapes.push_back(s);
    p.starts.push_back(p.n);
    p.n += s * s;
  }
  return p;
}

DeformableBenchRow measure(const DeformableBenchConfig& c, int64_t side) {
  const Pyramid py = pyramid(side, c.levels);
  const int64_t n = py.n, h = c.heads, d = c.head_dim, lv = c.levels, pt = c.points;
  DeformableBenchRow row;
  row.n = n;
  // Deformable: value [1, N, H, Dh], N queries, random locations in the maps.
  const auto value = uniform_floats(n * h * d, 1, -1, 1);
  const auto loc = deformable_bench_locations(py.shapes, h, pt, c.uniform, 2);
  const auto w = uniform_floats(n * h * lv * pt, 3, 0, 2.0f / float(lv * pt));
  std::vector<float> out(static_cast<size_t>(n * h * d));
  MsDeformAttnArgs a;
  a.value = View<const float, 4>::contiguous(value.data(), {1, n, h, d});
  a.spatial_shapes = py.shapes;
  a.level_start_index = py.starts;
  a.sampling_locations = View<const float, 6>::contiguous(loc.data(), {1, n, h, lv, pt, 2});
  a.attention_weights = View<const float, 5>::contiguous(w.data(), {1, n, h, lv, pt});
  a.out = View3::contiguous(out.data(), {1, n, h * d});
  row.deform_ms = time_ms(c, [&] { ms_deform_attn(a); });
  const double gathered = double(n * h * lv * pt) * 4.0 * double(d) * sizeof(float);
  row.deform_gbps = gathered / (row.deform_ms * 1e6);

  // Dense: flash attention over the same N tokens, H heads of Dh, not causal.
  const auto q = uniform_floats(n * h * d, 4, -1, 1), k = uniform_floats(n * h * d, 5, -1, 1);
  std::vector<float> o(q.size()), lse(static_cast<size_t>(h * n));
  AttentionArgs fa{.q = ConstView3::contiguous(q.data(), {n, h, d}),
                   .k = ConstView3::contiguous(k.data(), {n, h, d}),
                   .v = ConstView3::contiguous(value.data(), {n, h, d}),
                   .out = View3::contiguous(o.data(), {n, h, d}),
                   .lse = View2::contiguous(lse.data(), {h, n})};
  const AttentionOptions opts{};
  row.dense_ms = time_ms(c, [&] { flash_attention(opts, fa); });
  row.dense_gflops = 4.0 * double(d) * double(n) * double(n) * double(h) / (row.dense_ms * 1e6);

  if (c.backward) {
    const auto d_out = uniform_floats(n * h * d, 6, -1, 1);
    std::vector<float> dv(value.size()), dloc(loc.size()), dw(w.size());
    const MsDeformAttnGrads g{
        .d_out = ConstView3::contiguous(d_out.data(), {1, n, h * d}),
        .d_value = View<float, 4>::contiguous(dv.data(), {1, n, h, d}),
        .d_sampling_locations = View<float, 6>::contiguous(dloc.data(), {1, n, h, lv, pt, 2}),
        .d_attention_weights = View<float, 5>::contiguous(dw.data(), {1, n, h, lv, pt})};
    row.deform_bwd_ms = time_ms(c, [&] { ms_deform_attn_backward(a, g); });
    std::vector<float> dq(q.size()), dk(k.size()), dv2(value.size());
    const AttentionGrads fg{.d_out = ConstView3::contiguous(d_out.data(), {n, h, d}),
                            .d_q = View3::contiguous(dq.data(), {n, h, d}),
                            .d_k = View3::contiguous(dk.data(), {n, h, d}),
                            .d_v = View3::contiguous(dv2.data(), {n, h, d})};
    row.dense_bwd_ms = time_ms(c, [&] { flash_attention_backward(opts, fa, fg); });
  }
  return row;
}

}  // namespace

std::vector<float> deformable_bench_locations(const std::vector<int64_t>& shapes, int64_t heads,
                                              int64_t points, bool uniform, uint32_t seed) {
  const int64_t lv = int64_t(shapes.size() / 2);
  int64_t n = 0;
  for (int64_t l = 0; l < lv; ++l) n += shapes[size_t(2 * l)] * shapes[size_t(2 * l + 1)];
  std::vector<float> loc(static_cast<size_t>(n * heads * lv * points * 2));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f), noise(-0.5f, 0.5f);
  if (uniform) {
    for (auto& x : loc) x = u01(rng);
    return loc;
  }
  size_t i = 0;
  for (int64_t lq = 0; lq < lv; ++lq) {
    const int64_t hq = shapes[size_t(2 * lq)], wq = shapes[size_t(2 * lq + 1)];
    for (int64_t y = 0; y < hq; ++y)
      for (int64_t x = 0; x < wq; ++x) {
        const double rx = (double(x) + 0.5) / double(wq), ry = (double(y) + 0.5) / double(hq);
        for (int64_t h = 0; h < heads; ++h) {
          const double th = 2.0 * std::numbers::pi * double(h) / double(heads);
          const double m = std::max(std::abs(std::cos(th)), std::abs(std::sin(th)));
          const double dx = std::cos(th) / m, dy = std::sin(th) / m;
          for (int64_t l = 0; l < lv; ++l)
            for (int64_t p = 0; p < points; ++p) {
              const double hl = double(shapes[size_t(2 * l)]), wl = double(shapes[size_t(2 * l + 1)]);
              loc[i++] = float(rx + (dx * double(p + 1) + noise(rng)) / wl);
              loc[i++] = float(ry + (dy * double(p + 1) + noise(rng)) / hl);
            }
        }
      }
  }
  return loc;
}

LogLogFit fit_log_log(const std::vector<double>& x, const std::vector<double>& y) {
  check(x.size() == y.size() && x.size() >= 2, "fit_log_log: need at least two points");
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double m = double(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double lx = std::log(x[i]), ly = std::log(y[i]);
    sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly;
  }
  const double den = m * sxx - sx * sx;
  check(den > 0, "fit_log_log: need at least two distinct x");
  LogLogFit f;
  f.slope = (m * sxy - sx * sy) / den;
  f.intercept = (sy - f.slope * sx) / m;
  return f;
}

DeformableBenchResult run_deformable_bench(const DeformableBenchConfig& c) {
  check(!c.sides.empty(), "--sides: give at least one size");
  for (int64_t s : c.sides) check(s >= 1 && s <= 4096, "--sides: ", s, " is not in [1, 4096]");
  check(c.heads >= 1 && c.head_dim >= 1 && c.levels >= 1 && c.points >= 1,
        "bench deformable: heads, head-dim, levels and points must be >= 1");
  check(c.repeats >= 1, "--repeats: must be >= 1");
  check(c.min_seconds >= 0, "--min-seconds: must be >= 0");
  std::vector<int64_t> sides = c.sides;
  std::sort(sides.begin(), sides.end());
  // The slopes are fitted over the sizes with N >= fit_min_n: at least two distinct ones.
  std::vector<int64_t> fitted;
  for (int64_t s : sides)
    if (const int64_t n = pyramid(s, c.levels).n; n >= c.fit_min_n && (fitted.empty() || fitted.back() != n))
      fitted.push_back(n);
  check(fitted.size() >= 2, "--fit-min-n: ", fitted.size(), " of the --sides give N >= ", c.fit_min_n,
        "; the log-log slopes need two distinct N (add larger --sides or lower --fit-min-n)");
  ThreadCountScope threads(c.threads);
  DeformableBenchResult r;
  for (int64_t s : sides) r.rows.push_back(measure(c, s));
  std::vector<double> n, td, tf;
  for (const auto& row : r.rows) {
    if (row.deform_ms < row.dense_ms && r.first_faster_n == 0) r.first_faster_n = row.n;
    if (row.n < c.fit_min_n) continue;
    n.push_back(double(row.n));
    td.push_back(row.deform_ms);
    tf.push_back(row.dense_ms);
  }
  if (n.size() >= 2 && n.front() != n.back()) {
    r.deform_fit = fit_log_log(n, td);
    r.dense_fit = fit_log_log(n, tf);
    const double ds = r.dense_fit.slope - r.deform_fit.slope;
    if (ds > 0) r.crossover_n = std::exp((r.deform_fit.intercept - r.dense_fit.intercept) / ds);
  }
  r.threads = num_threads();
  r.read_gbps = measure_read_gbps(r.threads);
  r.sgemm_gflops = measure_sgemm_gflops(r.threads);
  return r;
}

}  // namespace attnkit
