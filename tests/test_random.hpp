#pragma once
// Seeded standard-normal test data shared by the C++ tests.
#include <cstdint>
#include <random>
#include <vector>

namespace attnkit::testing {

// n samples of N(0, 1) from a Mersenne Twister seeded with `seed`.
inline std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  return x;
}

}  // namespace attnkit::testing
