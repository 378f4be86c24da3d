#pragma once
// Seeded normal and uniform test data shared by the C++ tests (Mersenne Twister, float).
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace attnkit {

// n samples of N(0, sigma²) from a Mersenne Twister seeded with `seed`.
inline std::vector<float> randn(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  return x;
}

// n samples of U(-1, 1) from a Mersenne Twister seeded with `seed`.
inline std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Adds N(0, sigma²) samples from a Mersenne Twister seeded with `seed` to every element of x.
inline void add_randn(std::span<float> x, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  for (float& v : x) v += dist(rng);
}

}  // namespace attnkit
