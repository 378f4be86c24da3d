// BERT run setup: configs to pretrain and fine-tune, tasks by name, checked options (see bert_run.hpp).
#include "attnkit/train/bert_run.hpp"

#include <cmath>

#include "attnkit/core/error.hpp"
#include "attnkit/core/file_io.hpp"
#include "attnkit/io/text_corpus.hpp"
#include "attnkit/io/tokenizer.hpp"
#include "attnkit/train/presets.hpp"

namespace attnkit {

BertConfig pretraining_bert_config(const BertModelSource& source, BertObjective objective, const RunDir& run) {
  BertConfig cfg = source.config_file.empty()
                       ? bert_preset(source.preset)
                       : parse_bert_config(read_file(source.config_file, "--config"), source.config_file);
  cfg.architecture = objective == BertObjective::kMlmNsp ? BertArchitecture::kPreTraining : BertArchitecture::kMaskedLM;
  if (source.config_file.empty()) cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = source.dropout;
  if (run.start() == RunStart::kResume) {
    if (source.shape_given) run.check_config(bert_config_to_json(cfg));
    cfg = parse_bert_config(run.checkpoint_config());
  }
  check(cfg.vocab_size >= ByteTokenizer::vocab_size(), "config: vocab_size must be >= ",
        ByteTokenizer::vocab_size(), " for the byte tokenizer");
  return cfg;
}

BertTask make_bert_task(const std::string& name, const std::vector<std::string>& classes, int64_t max_len) {
  if (name == "fortune-file")
    return {fortune_file_task(classes, max_len, kFortunesDir), BertArchitecture::kSequenceClassification,
            BertObjective::kClassify};
  if (name == "attribution-tokens")
    return {attribution_task(load_fortunes(), false, max_len), BertArchitecture::kTokenClassification,
            BertObjective::kTokens};
  if (name == "attribution-span")
    return {attribution_task(load_fortunes(), true, max_len), BertArchitecture::kQuestionAnswering,
            BertObjective::kSpan};
  fail("--task: expected fortune-file, attribution-tokens or attribution-span, got '", name, "'");
}

std::string bert_task_name(const BertConfig& cfg) {
  return cfg.architecture == BertArchitecture::kSequenceClassification ? "fortune-file"
         : cfg.architecture == BertArchitecture::kTokenClassification  ? "attribution-tokens"
                                                                        : "attribution-span";
}

BertConfig finetuning_bert_config(const BertConfig& pretrained, const BertTask& task, double dropout,
                                  const RunDir& run) {
  BertConfig cfg = pretrained;
  cfg.architecture = task.architecture;
  cfg.labels = task.data.labels;
  cfg.num_labels = task.data.labels.empty() ? 2 : int64_t(task.data.labels.size());
  cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = dropout;
  if (run.start() == RunStart::kResume) run.check_config(bert_config_to_json(cfg));
  return cfg;
}

BertTrainOptions checked_bert_train_options(BertTrainOptions o, const ScheduleFlags& flags, double dropout) {
  check(o.steps >= 1, "--steps: must be >= 1, got ", o.steps);
  check_batch(o.batch, "--batch");
  check_non_negative(o.eval_every, "--eval-every");
  check_non_negative(o.checkpoint_every, "--checkpoint-every");
  check_batch(o.eval_examples, "--eval-examples");
  o.schedule = checked_schedule(flags, o.steps, o.adamw.weight_decay, o.clip);
  check(std::isfinite(dropout) && dropout >= 0 && dropout < 1, "--dropout: must be in [0, 1), got ", dropout);
  return o;
}

}  // namespace attnkit
