// Seeded test data (test_random.hpp). Compiled at -O2 in every build (CMakeLists.txt).
#include "test_random.hpp"

#include <random>

namespace attnkit {

std::vector<float> randn(int64_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  return x;
}

std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void add_randn(std::span<float> x, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  for (float& v : x) v += dist(rng);
}

}  // namespace attnkit
