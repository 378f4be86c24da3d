#pragma once
// Counter-based RNG (Philox4x32-10, Salmon et al., SC'11): the numbers are a pure function of
// (seed, counter), so any thread regenerates the same value for the same coordinates. Dropout
// keys its counter by (sequence, head, query i, key j), which lets the backward rebuild the mask.
#include <array>
#include <cstdint>

namespace attnkit {

// Four 32-bit random words for a 64-bit key and a 128-bit counter (c0 least significant).
std::array<uint32_t, 4> philox4x32(uint64_t key, std::array<uint32_t, 4> counter);

// Uniform float in [0, 1) from a 32-bit word (24 random bits; exact multiples of 2^-24).
inline float uniform_from_bits(uint32_t bits) { return float(bits >> 8) * 0x1p-24f; }

// Uniform float in [0, 1) at coordinates (a, b, c, d) for `seed`.
inline float uniform_at(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return uniform_from_bits(philox4x32(seed, {d, c, b, a})[0]);
}

// Dropout decision for attention probability (seq, head, i, j): true if the entry is kept.
// Keep probability is 1 - p; the same arguments always give the same answer.
inline bool dropout_keep(uint64_t seed, float p, uint32_t seq, uint32_t head, uint32_t i,
                         uint32_t j) {
  return uniform_at(seed, seq, head, i, j) >= p;
}

// factors[k] = dropout_keep(seed, p, seq, head, i, j0 + k) ? keep_scale : 0 for k in [0, n)
// (j0 + k wraps as uint32_t, as the scalar call's argument does). The same decisions as
// dropout_keep, computed a SIMD vector of counters at a time (Highway; 16 with AVX-512):
// attention dropout needs one decision per (query, key) pair, and one scalar Philox call per pair
// took about a third of a BERT training step.
void dropout_keep_factors(uint64_t seed, float p, float keep_scale, uint32_t seq, uint32_t head,
                          uint32_t i, uint32_t j0, int64_t n, float* factors);

}  // namespace attnkit
