#pragma once
// The naive attention baseline, as a framework's unfused path computes it: K and V repeated to H
// heads, every score materialised ([H, Lq, Lk] floats per sequence), then sgemm + softmax + sgemm.
// Exists to be measured against; memory grows as H·Lq·Lk.
#include <cstdint>

#include "attnkit/attention/attention.hpp"

namespace attnkit {

// Bytes of scratch attention_naive allocates for these arguments (scores + repeated K/V).
int64_t attention_naive_bytes(const AttentionArgs& args);

// Same contract as attention_reference except dropout (rejected); masked scores are computed and
// then discarded. Parallel over heads; BLAS single-threaded inside.
void attention_naive(const AttentionOptions& opts, const AttentionArgs& args);

}  // namespace attnkit
