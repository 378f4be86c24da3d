#pragma once
// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_(params, max_norm):
// norm = sqrt(Σ over all spans Σ g²); if max_norm / (norm + 1e-6) < 1, every gradient is scaled
// by that factor. Squares are summed in double over fixed chunks of 2^14 elements whose partial
// sums are added in span-then-chunk order, so the norm is identical for any thread count.
#include <span>

namespace attnkit {

// Global L2 norm of all gradients (units of the gradients), accumulated in double.
double global_grad_norm(std::span<const std::span<const float>> grads);
// Scales all gradients in place so their global norm is at most max_norm (> 0); returns the
// norm before clipping. A non-finite norm (inf/NaN gradient) is returned with gradients left
// untouched, so the caller can skip the step.
double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm);
// The scaling of clip_grad_norm for a norm computed elsewhere (e.g. the whole model's, summed
// over tensor-parallel shards): scales by max_norm / (norm + 1e-6) if that is < 1; a non-finite
// norm leaves the gradients untouched.
void scale_to_max_norm(std::span<const std::span<float>> grads, double max_norm, double norm);

}  // namespace attnkit
