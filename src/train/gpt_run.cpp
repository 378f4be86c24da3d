// GPT run setup: the initial model and the checked trainer options (see gpt_run.hpp).
#include "attnkit/train/gpt_run.hpp"

#include "attnkit/core/error.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/io/tokenizer.hpp"
#include "attnkit/models/model_registry.hpp"
#include "attnkit/train/presets.hpp"

namespace attnkit {

GptModel initial_gpt_model(const GptModelSource& source, uint64_t seed, const RunDir& run) {
  auto given = [&] {
    return source.config_file.empty() ? gpt_preset(source.preset)
                                      : parse_gpt_config(read_file(source.config_file, "--config"), source.config_file);
  };
  if (run.start() == RunStart::kResume) {
    check(source.init.empty(), "--init: not with --resume (a resumed run continues from its own checkpoint)");
    GptModel model(parse_gpt_config(run.checkpoint_config()));
    if (source.shape_given) run.check_config(gpt_config_to_json(given()));
    return model;
  }
  if (source.init.empty()) {
    GptModel model(given());
    model.init_random(seed);
    return model;
  }
  run.check_input_outside(source.init, "--init");
  require_model_kind(source.init, ModelKind::kGpt, "train gpt --init");
  return GptModel::load(source.init);
}

TrainOptions checked_gpt_train_options(TrainOptions o, const ScheduleFlags& flags, int64_t tokens,
                                       const GptConfig& cfg) {
  check(tokens >= 0, "--tokens: must be >= 0");
  check(cfg.vocab_size - cfg.registers >= ByteTokenizer::vocab_size(),
        "config: vocab_size - attnkit_registers must be >= ", ByteTokenizer::vocab_size(),
        " for the byte tokenizer (registers take the last ids)");
  check_batch(o.batch, "--batch");
  check(o.seq_len >= 1, "--seq: must be >= 1, got ", o.seq_len);
  if (tokens > 0) o.steps = (tokens + o.batch * o.seq_len - 1) / (o.batch * o.seq_len);
  check(o.steps >= 1, "--steps: must be >= 1, got ", o.steps);
  check_non_negative(o.eval_every, "--eval-every");
  check_non_negative(o.checkpoint_every, "--checkpoint-every");
  o.schedule = checked_schedule(flags, o.steps, o.adamw.weight_decay, o.clip);
  return o;
}

}  // namespace attnkit
