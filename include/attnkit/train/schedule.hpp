#pragma once
// Learning-rate schedule: linear warmup, then cosine decay to min_lr (the formula of llm.c's
// train_gpt2.c; nanoGPT's differs only in using (step+1)/(warmup+1) during warmup):
//   step < W:        lr = max_lr · (step + 1) / W
//   W <= step < N:   lr = min_lr + ½·(1 + cos(π·(step − W)/(N − W)))·(max_lr − min_lr)
//   step >= N:       lr = min_lr
// A pure function of the step, so a resumed run needs only the step count.
#include <cstdint>

namespace attnkit {

struct WarmupCosineSchedule {
  double max_lr = 6e-4;        // peak, reached at step W − 1
  double min_lr = 6e-5;        // floor, reached at step N
  int64_t warmup_steps = 0;    // W >= 0
  int64_t total_steps = 1000;  // N >= W: the step at which decay ends
};

// Learning rate for optimizer step `step` (0-based, >= 0); throws attnkit::Error on bad settings.
double warmup_cosine_lr(const WarmupCosineSchedule& schedule, int64_t step);

}  // namespace attnkit
