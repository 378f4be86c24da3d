#pragma once
// Vectorised row primitives for softmax-style kernels (Highway; AVX2 on this machine).
// All take contiguous float rows of length n.
#include <cstdint>

namespace attnkit {

// max_j x[j]; -inf for n = 0.
float row_max(const float* x, int64_t n);
// x[j] = exp(x[j] - m) in place, returns Σ_j x[j]; entries with x[j] - m < -64 (and -inf)
// become exactly 0, so no subnormal probabilities reach the GEMMs after it. m is finite.
float exp_sub_sum(float* x, int64_t n, float m);
// x[j] = c·tanh(x[j] / c) in place (softcap), c > 0.
void softcap_inplace(float* x, int64_t n, float c);
// x[j] *= a.
void scale_inplace(float* x, int64_t n, float a);
// Σ_j x[j]·y[j] (float accumulation in vector lanes).
float dot(const float* x, const float* y, int64_t n);

}  // namespace attnkit
