// bench/gemm_libs: OpenBLAS, BLIS, oneDNN and libxsmm on attnkit's own GEMM shapes, in one run.
// Each library uses its best calling pattern (backends.hpp); rounds alternate the libraries'
// order, and each figure is the best round. Prints markdown tables: GFLOP/s per library for 1 and
// 2 threads, and the best one as a fraction of the FMA peak measured in the same run
// (attnkit::measure_fma_gflops, as `attnkit bench roofline`; the best of its measurements taken
// before each round and after the last).
// Run: build/gemm_libs [rounds]   (rounds default 3)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "attnkit/tools/roofline.hpp"
#include "backends.hpp"
#include "conv_runner.hpp"

namespace gemm_libs {
namespace {

constexpr int64_t kTokens = 2048;  // T of the linear layers (batch × context of the presets)

std::vector<Problem> problems() {
  std::vector<Problem> ps;
  auto add = [&](const char* group, std::string name, bool ta, bool tb, int64_t m, int64_t n,
                 int64_t k, float beta, bool weight) {
    ps.push_back({group, std::move(name), ta, tb, m, n, k, beta, weight});
  };
  // flash_forward.cpp: a 512-row query tile (positions × G) against 512-key tiles, D 128.
  add("flash fwd", "S = Q·Kᵀ", false, true, 512, 512, 128, 0, false);
  add("flash fwd", "O += P·V", false, false, 512, 128, 512, 1, false);
  add("flash fwd", "S on the mask edge (32 pos × G 4)", false, true, 128, 128, 128, 0, false);
  // flash_backward.cpp: 256 stacked rows against 128-key tiles, D 128.
  add("flash bwd", "S = Q·Kᵀ, dP = dO·Vᵀ", false, true, 256, 128, 128, 0, false);
  add("flash bwd", "dV += Pᵀ·dO, dK += dSᵀ·Q", true, false, 128, 128, 256, 1, false);
  add("flash bwd", "dQ = dS·K", false, false, 256, 128, 128, 0, false);
  // linear.cpp over T tokens: y = x·Wᵀ, d_x = d_y·W, d_W += d_yᵀ·x; W [out, in].
  struct Layer { const char* name; int64_t out, in; };
  for (const Layer& l : {Layer{"GPT-s qkv", 384, 256}, Layer{"GPT-s mlp up", 688, 256},
                         Layer{"GPT-s mlp down", 256, 688}, Layer{"d512 fc1", 2048, 512},
                         Layer{"d768 qkv", 2304, 768}, Layer{"d768 fc1", 3072, 768},
                         Layer{"d768 fc2", 768, 3072}, Layer{"d1024 fc1", 4096, 1024}}) {
    add("linear", std::string(l.name) + " y", false, true, kTokens, l.out, l.in, 0, true);
    add("linear", std::string(l.name) + " d_x", false, false, kTokens, l.in, l.out, 0, true);
    add("linear", std::string(l.name) + " d_W", true, false, l.out, l.in, kTokens, 1, false);
  }
  // One 512 × 512 tile of C as nn::parallel_sgemm computes it (one thread per tile): C, and B for
  // d_x, are views into the layer's wider matrices (row strides ldb, ldc).
  auto tile = [&](std::string name, bool tb, int64_t k, int64_t ldb, int64_t ldc) {
    add("linear tile", std::move(name), false, tb, 512, 512, k, 0, true);
    ps.back().ldb = ldb, ps.back().ldc = ldc;
  };
  tile("GPT-s mlp up y, tile of [2048, 688]", true, 256, 0, 688);
  tile("d768 fc1 y, tile of [2048, 3072]", true, 768, 0, 3072);
  tile("d768 fc1 d_x, tile of [2048, 768]", false, 3072, 768, 768);
  tile("d1024 fc1 d_x, tile of [2048, 1024]", false, 4096, 1024, 1024);
  // conv2d.cpp im2col GEMMs of the CNN (widths 32/64/128, 28×28 input), images per GEMM as
  // images_per_gemm chooses: y = w·col, d_W += d_y·colᵀ, d_col = wᵀ·d_y.
  struct Conv { const char* name; int64_t o, kk, cols; };
  for (const Conv& c : {Conv{"stem 1→32 @28", 32, 9, 784}, Conv{"32→64 @14", 64, 288, 588},
                        Conv{"64→64 @14", 64, 576, 392}, Conv{"64→128 @7", 128, 576, 441},
                        Conv{"128→128 @7", 128, 1152, 196}}) {
    add("conv", std::string(c.name) + " y", false, false, c.o, c.cols, c.kk, 0, false);
    add("conv", std::string(c.name) + " d_W", false, true, c.o, c.kk, c.cols, 1, false);
    if (c.kk > 9) add("conv", std::string(c.name) + " d_col", true, false, c.kk, c.cols, c.o, 0, false);
  }
  // decode.cpp: G query heads of one KV head against 4096 cached keys, D 128.
  for (int64_t g : {1, 2, 4, 8, 16, 32}) {
    add("decode", "S = q·Kᵀ, G " + std::to_string(g), false, true, g, 4096, 128, 0, false);
    add("decode", "O = P·V, G " + std::to_string(g), false, false, g, 128, 4096, 0, false);
  }
  return ps;
}

std::vector<ConvShape> convs() {  // the CNN's convolutions, batch 32
  return {{32, 1, 32, 28, 28, 3}, {32, 32, 64, 14, 14, 3}, {32, 64, 64, 14, 14, 3},
          {32, 64, 128, 7, 7, 3}, {32, 128, 128, 7, 7, 3}, {32, 32, 64, 14, 14, 1}};
}

Operands operands(const Problem& p, uint32_t seed) {
  Operands o;
  o.lda = p.ta ? p.m : p.k, o.ldb = std::max(p.tb ? p.k : p.n, p.ldb), o.ldc = std::max(p.n, p.ldc);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  o.a.resize(size_t(p.m * p.k)), o.b.resize(size_t((p.tb ? p.n : p.k) * o.ldb));
  o.c.assign(size_t(p.m * o.ldc), 0.0f);
  for (float& x : o.a) x = u(rng);
  for (float& x : o.b) x = u(rng);
  return o;
}

// Seconds per call: one warm-up call, then calls until at least 40 ms (at least 2).
double seconds_per_call(Runner& r, int threads) {
  r.run(threads);
  int reps = 0;
  const double t0 = attnkit::now_seconds();
  double t = 0;
  do {
    r.run(threads);
    ++reps;
    t = attnkit::now_seconds() - t0;
  } while (t < 0.04 || reps < 2);
  return t / reps;
}

// Largest error of c over 64 sampled entries vs a double-precision product, relative to
// Σ|a||b| of that entry (c computed with beta·0: C was zero before the call).
double sampled_error(const Problem& p, const Operands& o) {
  std::mt19937 rng(7);
  double worst = 0;
  for (int s = 0; s < 64; ++s) {
    const int64_t i = int64_t(rng() % uint64_t(p.m)), j = int64_t(rng() % uint64_t(p.n));
    double acc = 0, mag = 0;
    for (int64_t q = 0; q < p.k; ++q) {
      const double x = p.ta ? o.a[size_t(q * o.lda + i)] : o.a[size_t(i * o.lda + q)];
      const double y = p.tb ? o.b[size_t(j * o.ldb + q)] : o.b[size_t(q * o.ldb + j)];
      acc += x * y, mag += std::fabs(x * y);
    }
    worst = std::max(worst, std::fabs(o.c[size_t(i * o.ldc + j)] - acc) / std::max(mag, 1e-30));
  }
  return worst;
}

std::string first_line(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (key.empty() || line.rfind(key, 0) == 0) return key.empty() ? line : line.substr(line.find(':') + 2);
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  const int thread_counts[] = {1, 2};
  std::vector<std::unique_ptr<Library>> libs;
  libs.push_back(make_openblas());
  if (auto b = make_blis()) libs.push_back(std::move(b));
  libs.push_back(make_onednn(false));
  libs.push_back(make_onednn(true));
  libs.push_back(make_libxsmm());
  const size_t nl = libs.size();

  const auto ps = problems();
  std::vector<Operands> ops;
  std::vector<std::vector<std::unique_ptr<Runner>>> runners(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    ops.push_back(operands(ps[i], uint32_t(i + 1)));
  }
  for (size_t i = 0; i < ps.size(); ++i)
    for (auto& l : libs) runners[i].push_back(l->prepare(ps[i], ops[i]));
  const auto cs = convs();
  std::vector<std::unique_ptr<Runner>> conv_runners;
  for (const auto& c : cs) conv_runners.push_back(make_onednn_conv(c));

  std::map<int, double> peak;
  for (int t : thread_counts) peak[t] = attnkit::measure_fma_gflops(t);
  // best[t][problem][library] seconds per call; conv_best[t][conv]
  std::map<int, std::vector<std::vector<double>>> best;
  std::map<int, std::vector<double>> conv_best;
  for (int t : thread_counts) {
    best[t].assign(ps.size(), std::vector<double>(nl, 1e300));
    conv_best[t].assign(cs.size(), 1e300);
  }
  for (int r = 0; r < rounds; ++r)
    for (int t : thread_counts) {
      peak[t] = std::max(peak[t], attnkit::measure_fma_gflops(t));
      for (size_t i = 0; i < ps.size(); ++i)
        for (size_t q = 0; q < nl; ++q) {  // the order rotates with the round and the problem
          const size_t li = (q + size_t(r) + i) % nl;
          if (!runners[i][li]) continue;
          best[t][i][li] = std::min(best[t][i][li], seconds_per_call(*runners[i][li], t));
        }
      for (size_t c = 0; c < cs.size(); ++c)
        conv_best[t][c] = std::min(conv_best[t][c], seconds_per_call(*conv_runners[c], t));
    }
  for (int t : thread_counts) peak[t] = std::max(peak[t], attnkit::measure_fma_gflops(t));

  // Correctness of every library's result on every problem (C zeroed, one call, 1 thread).
  std::vector<std::string> errors;
  for (size_t i = 0; i < ps.size(); ++i)
    for (size_t li = 0; li < nl; ++li) {
      if (!runners[i][li]) continue;
      std::fill(ops[i].c.begin(), ops[i].c.end(), 0.0f);
      runners[i][li]->run(1);
      const double e = sampled_error(ps[i], ops[i]);
      if (!(e < 1e-5)) errors.push_back(libs[li]->name() + " on " + ps[i].name + ": " + std::to_string(e));
    }

  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf("CPU: %s; %s; load average at the end: %s\n",
              first_line("/proc/cpuinfo", "model name").c_str(), date,
              first_line("/proc/loadavg", "").c_str());
  for (int t : thread_counts) std::printf("FMA peak, %d thread%s: %.0f GFLOP/s\n", t, t > 1 ? "s" : "", peak[t]);
  std::printf("rounds: %d (best round per figure); all libraries' results checked: %s\n", rounds,
              errors.empty() ? "every sampled entry within 1e-5 of the float64 product" : "ERRORS below");
  for (const auto& e : errors) std::printf("  error: %s\n", e.c_str());

  for (int t : thread_counts) {
    std::printf("\n%d thread%s: GFLOP/s (best library in bold; its fraction of the FMA peak)\n\n", t, t > 1 ? "s" : "");
    std::printf("| class | product | op | m × n × k |");
    for (auto& l : libs) std::printf(" %s |", l->name().c_str());
    std::printf(" best / peak |\n|---|---|---|---|");
    for (size_t q = 0; q < nl; ++q) std::printf("---:|");
    std::printf("---:|\n");
    for (size_t i = 0; i < ps.size(); ++i) {
      const auto& p = ps[i];
      const auto& b = best[t][i];
      const size_t win = size_t(std::min_element(b.begin(), b.end()) - b.begin());
      if (b[win] >= 1e300) continue;
      std::printf("| %s | %s | %s%s | %lld × %lld × %lld |", p.group.c_str(), p.name.c_str(),
                  p.ta ? "T" : "N", p.tb ? "T" : "N", (long long)p.m, (long long)p.n, (long long)p.k);
      for (size_t li = 0; li < nl; ++li) {
        if (b[li] >= 1e300) { std::printf(" — |"); continue; }
        const double g = p.flops() / b[li] * 1e-9;
        std::printf(li == win ? " **%.0f** |" : " %.0f |", g);
      }
      std::printf(" %.0f %% |\n", 100.0 * p.flops() / b[win] * 1e-9 / peak[t]);
    }
    for (size_t c = 0; c < cs.size(); ++c) {
      const auto& s = cs[c];
      std::printf("| conv (oneDNN convolution) | %lld→%lld @%lld, %lld×%lld, batch %lld | direct | — |",
                  (long long)s.c, (long long)s.o, (long long)s.h, (long long)s.kernel, (long long)s.kernel,
                  (long long)s.n);
      const double g = s.flops() / conv_best[t][c] * 1e-9;
      for (size_t li = 0; li < nl; ++li) std::printf(libs[li]->name() == "oneDNN" ? " %.0f |" : " — |", g);
      std::printf(" %.0f %% |\n", 100.0 * g / peak[t]);
    }
  }
  return errors.empty() ? 0 : 1;
}

}  // namespace gemm_libs

int main(int argc, char** argv) { return gemm_libs::main(argc, argv); }
