#pragma once
// Reference attention: the executable spec of the attention contract (docs/architecture.md).
// Scalar loops, double accumulation, materialises one row of scores at a time. Slow by design;
// every fast kernel is tested against it.
#include "attnkit/attention/attention.hpp"

namespace attnkit {

// out = softmax(softcap(scale·q·kᵀ) + ALiBi bias + mask, with sinks) · dropout · v; lse = log of
// the row's denominator (includes exp(b_h)); a row with no visible key gives zeros and
// lse = -inf (lse = b_h when a sink is present).
void attention_reference(const AttentionOptions& opts, const AttentionArgs& args);

// Gradients of attention_reference w.r.t. q, k, v and the sink logits (all assigned). Recomputes
// the forward in double; args.out and args.lse are not read.
void attention_reference_backward(const AttentionOptions& opts, const AttentionArgs& args,
                                  const AttentionGrads& grads);

}  // namespace attnkit
