#pragma once
// Setting up a GPT training run, the same for the CLI's `train gpt`, C++ and Python: the model to
// train (a preset, a config.json, a model directory to continue from, or a resumed run's own
// config) and the trainer options with every setting checked (errors name the CLI flags).
#include <cstdint>
#include <string>

#include "attnkit/models/gpt.hpp"
#include "attnkit/train/gpt_trainer.hpp"
#include "attnkit/train/run_dir.hpp"

namespace attnkit {

// Where the model of a run comes from.
struct GptModelSource {
  std::string preset = "small";  // train/presets.hpp; used when config_file and init are empty
  std::string config_file;       // a config.json (Hugging Face Llama keys)
  std::string init;              // a model directory to continue from (its weights, a fresh optimizer)
  bool shape_given = false;      // preset or config_file chosen explicitly: checked against a resumed run
};

// The model to train in `run`: with RunStart::kResume a model of the run's own config (its weights
// come from the checkpoint; a given shape that differs is an error); with `init` that model (it
// must be a GPT directory other than the run's); otherwise the preset or config, initialised from
// `seed`.
GptModel initial_gpt_model(const GptModelSource& source, uint64_t seed, const RunDir& run);

// The learning-rate schedule and length of a run as given, before checking.
struct GptScheduleSpec {
  double lr = 1e-3, min_lr = 1e-4;  // peak and final learning rate
  int64_t warmup = 100;             // warmup steps
  bool warmup_given = false;        // warmup set explicitly (then it must lie in [0, steps])
  int64_t tokens = 0;               // > 0: steps = ceil(tokens / (batch · seq_len))
  int threads = 0;                  // the thread count the run will use (checked only)
};

// `options` for training a model of `config`: steps from spec.tokens, the schedule from spec,
// every setting checked (byte vocabulary fits, batch, seq, steps, learning rates, weight decay,
// clip, threads, cadences, warmup); throws attnkit::Error naming the flag.
TrainOptions checked_gpt_train_options(TrainOptions options, const GptScheduleSpec& spec, const GptConfig& config);

}  // namespace attnkit
