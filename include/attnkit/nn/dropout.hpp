#pragma once
// Dropout (Srivastava et al. 2014), inverted: y = x·keep/(1 - p), keep ~ Bernoulli(1 - p).
// PyTorch: torch.nn.functional.dropout(x, p, training=True), with our own mask.
//
// The mask is counter-based (Philox, core/rng.hpp): element (t, c) of a [T, C] tensor is kept iff
// uniform(seed', stream, t·C + c) >= p, so the backward regenerates the forward's mask from
// (seed, stream) instead of storing it, on any thread. seed' = seed ⊕ a fixed salt, so the mask
// never coincides with attention dropout's (core/rng.hpp's dropout_keep) for the same seed. Use a
// distinct stream per dropout site (e.g. layer·4 + site) and a new seed per step.
// Shapes: x, y, d_y, d_x [T, C] with contiguous rows; y may alias x and d_x may alias d_y.
// Gradient contract (docs/architecture.md): no parameters; dropout_backward ASSIGNS (=) d_x.
// Reference: dropout_reference.cpp (one Philox call per element, double scaling).
#include <cstdint>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

struct DropoutOptions {  // what to compute
  float p = 0;           // drop probability, in [0, 1); 0 = identity
  uint64_t seed = 0;     // RNG key (new per training step)
  uint32_t stream = 0;   // dropout site, so two sites with one seed draw independent masks
};

// True if element `index` (= t·C + c) is kept under opts; the mask every dropout function uses.
bool dropout_keeps(const DropoutOptions& opts, uint64_t index);

// y[T, C] = x·keep/(1 - p).
void dropout_forward(View2 y, ConstView2 x, const DropoutOptions& opts);
// d_x[T, C] = d_y·keep/(1 - p) (assigned), with the forward's mask.
void dropout_backward(View2 d_x, ConstView2 d_y, const DropoutOptions& opts);

// References with the same contracts as dropout_forward / dropout_backward.
void dropout_forward_reference(View2 y, ConstView2 x, const DropoutOptions& opts);
void dropout_backward_reference(View2 d_x, ConstView2 d_y, const DropoutOptions& opts);

}  // namespace attnkit
