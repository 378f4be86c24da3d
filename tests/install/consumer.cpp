// A program built against an installed attnkit (find_package or pkg-config): causal flash attention
// with grouped KV heads on a tiny input, checked against softmax(q·kᵀ/sqrt(D) + mask)·v computed
// here in double; then a bad shape must raise attnkit::Error. Exit status 0 = pass.
#include <attnkit/attention/flash_attention.hpp>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  constexpr int64_t T = 5, H = 2, Hkv = 1, D = 4;  // q [T, H, D], k/v [T, Hkv, D]
  std::vector<float> q(T * H * D), k(T * Hkv * D), v(T * Hkv * D), out(T * H * D);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.7 * i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(1.3 * i), v[i] = std::sin(0.4 * i + 1);
  attnkit::AttentionArgs args{.q = attnkit::ConstView3::contiguous(q.data(), {T, H, D}),
                              .k = attnkit::ConstView3::contiguous(k.data(), {T, Hkv, D}),
                              .v = attnkit::ConstView3::contiguous(v.data(), {T, Hkv, D}),
                              .out = attnkit::View3::contiguous(out.data(), {T, H, D})};
  attnkit::flash_attention(attnkit::AttentionOptions::causal(), args);

  double max_err = 0;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> p(i + 1);  // causal: query i sees keys 0..i
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j <= i; ++j) {
        p[j] = 0;
        for (int64_t d = 0; d < D; ++d) p[j] += double(q[(i * H + h) * D + d]) * k[j * D + d] / std::sqrt(double(D));
        m = std::max(m, p[j]);
      }
      for (double& x : p) z += (x = std::exp(x - m));
      for (int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t j = 0; j <= i; ++j) o += p[j] / z * v[j * D + d];
        max_err = std::max(max_err, std::abs(o - out[(i * H + h) * D + d]));
      }
    }
  const double bound = 16 * D * FLT_EPSILON;  // |v| <= 1: a few float32 roundings per dot product
  std::printf("consumer: max |flash - reference| = %.3g (bound %.3g)\n", max_err, bound);
  if (!(max_err <= bound)) return 1;

  args.k = attnkit::ConstView3::contiguous(k.data(), {T, 3, 1});  // H = 2 is not a multiple of Hkv = 3
  try {
    attnkit::flash_attention({}, args);
  } catch (const attnkit::Error& e) {
    std::printf("consumer: bad shape rejected: %s\n", e.what());
    return 0;
  }
  std::printf("consumer: bad shape accepted\n");
  return 1;
}
