#pragma once
// Token embedding lookup: y[t, :] = table[ids[t], :]. PyTorch: torch.nn.functional.embedding.
//
// Shapes: ids [T] (int32, each in [0, V)), table [V, C], y [T, C]. An id outside [0, V) throws
// attnkit::Error naming its index before anything is written.
// Gradient contract (docs/architecture.md): *_backward ADDS (+=) into parameter gradients
// (d_table); ids have no gradient. Repeated ids accumulate in token order, so the result is
// bitwise identical for any thread count (threads split the channels, never the tokens).
// Reference: embedding_reference.cpp (double accumulation), same signatures.
#include <cstdint>
#include <span>

#include "attnkit/core/tensor.hpp"

namespace attnkit {

// y[T, C] = table[ids[t], :] for every token t.
void embedding_forward(View2 y, std::span<const int32_t> ids, ConstView2 table);
// d_table[ids[t], :] += d_y[t, :] for every token t, accumulated in token order.
void embedding_backward(View2 d_table, std::span<const int32_t> ids, ConstView2 d_y);

// Reference with the same contract as embedding_forward.
void embedding_forward_reference(View2 y, std::span<const int32_t> ids, ConstView2 table);
// Reference with the same contract as embedding_backward (sums each row's updates in double).
void embedding_backward_reference(View2 d_table, std::span<const int32_t> ids, ConstView2 d_y);

}  // namespace attnkit
