#pragma once
// Seeded normal and uniform test data shared by the C++ tests (Mersenne Twister, float). Defined
// in test_random.cpp, which builds optimised even where the tests build at -O0 (sanitizers): at
// -O0 drawing the samples was a large share of some tests' time.
#include <cstdint>
#include <span>
#include <vector>

namespace attnkit {

// n samples of N(0, sigma²) from a Mersenne Twister seeded with `seed`.
std::vector<float> randn(int64_t n, uint32_t seed, float sigma = 1.0f);

// n samples of U(-1, 1) from a Mersenne Twister seeded with `seed`.
std::vector<float> uniform(size_t n, uint32_t seed);

// Adds N(0, sigma²) samples from a Mersenne Twister seeded with `seed` to every element of x.
void add_randn(std::span<float> x, uint32_t seed, float sigma);

}  // namespace attnkit
