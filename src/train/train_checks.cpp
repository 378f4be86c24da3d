// Checks of the optimisation flags shared by the trainers (see train_checks.hpp).
#include "attnkit/train/train_checks.hpp"

#include <algorithm>
#include <cmath>

#include "attnkit/core/error.hpp"

namespace attnkit {

void check_optim_flags(const OptimFlagValues& f) {
  check(std::isfinite(f.lr) && f.lr >= 0, "--lr: must be a finite number >= 0, got ", f.lr);
  check(std::isfinite(f.min_lr) && f.min_lr >= 0 && f.min_lr <= f.lr, "--min-lr: must be in [0, --lr = ", f.lr,
        "], got ", f.min_lr);
  check(std::isfinite(f.weight_decay) && f.weight_decay >= 0, "--weight-decay: must be a finite number >= 0, got ",
        f.weight_decay);
  check(std::isfinite(f.clip) && f.clip >= 0, "--clip: must be a finite number >= 0 (0 = off), got ", f.clip);
  check(f.threads >= 0 && f.threads <= 1024, "--threads: must be in [0, 1024] (0 = all cores), got ", f.threads);
}

int64_t checked_warmup(int64_t warmup, bool given, int64_t steps, const char* warmup_flag, const char* steps_flag) {
  check(warmup >= 0, warmup_flag, ": must be >= 0, got ", warmup);
  if (!given) return warmup;  // the schedule then ramps over max(steps, warmup): a short run stays in it
  check(warmup <= steps, warmup_flag, ": ", warmup, " warmup steps exceed the run's ", steps, " (", steps_flag,
        ")");
  return warmup;
}

WarmupCosineSchedule checked_schedule(const ScheduleFlags& f, int64_t steps, double weight_decay, double clip) {
  check_optim_flags({.lr = f.lr, .min_lr = f.min_lr, .weight_decay = weight_decay, .clip = clip, .threads = f.threads});
  const int64_t warmup = checked_warmup(f.warmup, f.warmup_given, steps, "--warmup", "--steps");
  return {.max_lr = f.lr, .min_lr = f.min_lr, .warmup_steps = warmup, .total_steps = std::max(steps, warmup)};
}

void check_batch(int64_t value, const char* flag) {
  check(value >= 1 && value <= kMaxBatch, flag, ": must be in [1, ", kMaxBatch, "], got ", value);
}

void check_non_negative(int64_t value, const char* flag) {
  check(value >= 0, flag, ": must be >= 0, got ", value);
}

}  // namespace attnkit
