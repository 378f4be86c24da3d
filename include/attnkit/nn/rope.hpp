#pragma once
// Rotary position embedding (Su et al. 2021), Hugging Face Llama convention ("rotate_half"):
// channel i is paired with i + D/2; inv_freq[i] = theta^(-2i/D) for i < D/2; for a token at
// position p the angle is a_i = p·inv_freq[i] and
//   x'[i]       = x[i]·cos a_i - x[i + D/2]·sin a_i
//   x'[i + D/2] = x[i + D/2]·cos a_i + x[i]·sin a_i
// PyTorch: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]).
//
// Shapes: x [T, H, D] with D even and the last dimension contiguous; token and head strides are
// free, so x may be the q or k slice of a fused QKV buffer [T, (H + 2·Hkv)·D]. positions [T]
// (int64, >= 0). The rotation is applied in place.
// Angles are formed in double (p·inv_freq with p up to 1e6 and beyond keeps ~1e-10 rad), cos and
// sin evaluated in double, then rounded to float for the fast path's rotation.
// Gradient contract (docs/architecture.md): no parameters; rope_backward ASSIGNS (=) the input
// gradient, in place: the rotation is orthogonal, so d_x = R(-a)·d_y.
// Reference: rope_reference.cpp (rotation in double), same signatures.
#include <cstdint>
#include <span>
#include <vector>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct RopeOptions {       // what to compute
  double theta = 10000.0;  // base of the frequencies (Llama 2: 1e4, Llama 3: 5e5)
};

// inv_freq[D/2] = theta^(-2i/D), in double.
std::vector<double> rope_inv_freq(int64_t head_dim, const RopeOptions& opts);

// Rotates x[T, H, D] in place by the angles of positions[T].
void rope_forward(View3 x, std::span<const int64_t> positions, const RopeOptions& opts);
// Rotates the gradient d[T, H, D] in place by the negative angles: d_x = R(-a)·d_y.
void rope_backward(View3 d, std::span<const int64_t> positions, const RopeOptions& opts);

// References with the same contracts as rope_forward / rope_backward.
void rope_forward_reference(View3 x, std::span<const int64_t> positions, const RopeOptions& opts);
void rope_backward_reference(View3 d, std::span<const int64_t> positions, const RopeOptions& opts);

}  // namespace attnkit
