#pragma once
// Checks of the optimisation flags every trainer takes (GPT, BERT, images), run before any data
// is loaded or anything is written: each error names the command-line flag, never an internal
// type, and gives the value it got.
#include <cstdint>

#include "attnkit/train/schedule.hpp"

namespace attnkit {

struct OptimFlagValues {
  double lr = 0;            // --lr: finite, >= 0 (0 freezes the weights)
  double min_lr = 0;        // --min-lr: finite, in [0, --lr]
  double weight_decay = 0;  // --weight-decay: finite, >= 0
  double clip = 0;          // --clip: finite, >= 0 (0 = off)
  int threads = 0;          // --threads: in [0, 1024] (0 = all cores)
};

// Throws attnkit::Error naming the first flag whose value is out of range.
void check_optim_flags(const OptimFlagValues& flags);

// The warmup length for a run of `steps`: an explicit --warmup must lie in [0, steps] (an error
// otherwise); the command's default is kept even for a shorter run (the schedule then spans
// max(steps, warmup) steps, so runs of different lengths share their learning rates).
int64_t checked_warmup(int64_t warmup, bool given, int64_t steps, const char* warmup_flag,
                       const char* steps_flag);

// The learning-rate flags of a GPT or BERT run as given on the command line.
struct ScheduleFlags {
  double lr = 1e-3, min_lr = 1e-4;  // --lr (peak), --min-lr (end of the cosine decay)
  int64_t warmup = 0;               // --warmup: linear warmup steps
  bool warmup_given = false;        // --warmup set explicitly (then it must lie in [0, steps])
  int threads = 0;                  // --threads (checked only)
};

// Checks `flags` with --weight-decay and --clip (check_optim_flags, checked_warmup) and returns
// the schedule of a run of `steps` steps: warmup, then cosine decay over max(steps, warmup).
WarmupCosineSchedule checked_schedule(const ScheduleFlags& flags, int64_t steps, double weight_decay, double clip);

// Largest examples per step (--batch) or per evaluation a trainer takes: beyond it a step or an
// evaluation runs for hours without a word, which looks like a hang.
constexpr int64_t kMaxBatch = int64_t(1) << 20;
// Throws attnkit::Error unless value is in [1, kMaxBatch] (flag names the option: --batch, ...).
void check_batch(int64_t value, const char* flag);

// Throws attnkit::Error unless value >= 0 (flag names the option: --eval-every, --checkpoint-every).
void check_non_negative(int64_t value, const char* flag);

}  // namespace attnkit
