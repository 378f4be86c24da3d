// Linear warmup + cosine decay (llm.c's formula; see schedule.hpp).
#include "attnkit/train/schedule.hpp"

#include <cmath>
#include <numbers>

#include "attnkit/core/error.hpp"

namespace attnkit {

double warmup_cosine_lr(const WarmupCosineSchedule& s, int64_t step) {
  check(s.warmup_steps >= 0, "WarmupCosineSchedule.warmup_steps: expected >= 0, got ",
        s.warmup_steps);
  check(s.total_steps >= s.warmup_steps, "WarmupCosineSchedule.total_steps: expected >= "
        "warmup_steps = ", s.warmup_steps, ", got ", s.total_steps);
  check(std::isfinite(s.max_lr) && s.max_lr >= 0 && std::isfinite(s.min_lr) && s.min_lr >= 0,
        "WarmupCosineSchedule: max_lr and min_lr must be finite and >= 0, got ", s.max_lr, ", ",
        s.min_lr);
  check(step >= 0, "warmup_cosine_lr: step must be >= 0, got ", step);
  if (step < s.warmup_steps) return s.max_lr * double(step + 1) / double(s.warmup_steps);
  if (step >= s.total_steps) return s.min_lr;
  const double ratio = double(step - s.warmup_steps) / double(s.total_steps - s.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return s.min_lr + coeff * (s.max_lr - s.min_lr);
}

}  // namespace attnkit
