#pragma once
// Setting up a GPT training run, the same for the CLI's `train gpt`, C++ and Python: the model to
// train (a preset, a config.json, a model directory to continue from, or a resumed run's own
// config) and the trainer options with every setting checked (errors name the CLI flags).
#include <cstdint>
#include <string>

#include "attnkit/models/gpt.hpp"
#include "attnkit/train/gpt_trainer.hpp"
#include "attnkit/train/run_dir.hpp"
#include "attnkit/train/train_checks.hpp"

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

// `options` for training a model of `config`: steps = ceil(tokens / (batch · seq_len)) if tokens
// > 0, the schedule from `flags`, every setting checked (byte vocabulary fits, batch, seq, steps,
// cadences, learning rates, weight decay, clip, threads, warmup); throws attnkit::Error naming the flag.
TrainOptions checked_gpt_train_options(TrainOptions options, const ScheduleFlags& flags, int64_t tokens,
                                       const GptConfig& config);

}  // namespace attnkit
