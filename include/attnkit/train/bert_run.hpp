#pragma once
// Setting up a BERT training run, the same for the CLI's `train bert` / `finetune bert`, C++ and
// Python: the config to pretrain or fine-tune (a preset, a config.json, a pretrained model, or a
// resumed run's own config), the fortunes tasks by name, and the trainer options with every
// setting checked (errors name the CLI flags).
#include <string>
#include <vector>

#include "attnkit/models/bert_config.hpp"
#include "attnkit/train/bert_tasks.hpp"
#include "attnkit/train/bert_trainer.hpp"
#include "attnkit/train/run_dir.hpp"
#include "attnkit/train/train_checks.hpp"

namespace attnkit {

// Where a pretraining run's model shape comes from.
struct BertModelSource {
  std::string preset = "mini";  // train/presets.hpp; used when config_file is empty
  std::string config_file;      // a config.json (Hugging Face BertConfig keys; its own dropout)
  bool shape_given = false;     // preset or config_file chosen explicitly: checked against a resumed run
  double dropout = 0.1;         // hidden and attention dropout of a preset
};

// The config to pretrain with `objective` in `run`: the preset (with source.dropout) or the config
// file, with the architecture the objective needs (BertForPreTraining for mlm+nsp, else
// BertForMaskedLM); with RunStart::kResume the run's own config (a given shape that differs is
// an error). Throws unless the byte vocabulary fits.
BertConfig pretraining_bert_config(const BertModelSource& source, BertObjective objective, const RunDir& run);

// A fine-tuning task on Debian's fortunes by name, and the architecture and objective that fit it.
struct BertTask {
  BertTaskData data;
  BertArchitecture architecture;
  BertObjective objective;
};
// "fortune-file" (over `classes`), "attribution-tokens" or "attribution-span"; throws naming --task.
BertTask make_bert_task(const std::string& name, const std::vector<std::string>& classes, int64_t max_len);
// The task whose model `config` is (for evaluating a fine-tuned directory).
std::string bert_task_name(const BertConfig& config);

// The config that fine-tunes `pretrained` on `task`: its architecture, labels and `dropout`;
// with RunStart::kResume it must equal the run's own config (same pretrained model, task, dropout).
BertConfig finetuning_bert_config(const BertConfig& pretrained, const BertTask& task, double dropout,
                                  const RunDir& run);

// `options` with the schedule from `flags` and every setting checked (steps, batch, cadences,
// eval examples, learning rates, weight decay, clip, threads, warmup, dropout in [0, 1)).
BertTrainOptions checked_bert_train_options(BertTrainOptions options, const ScheduleFlags& flags, double dropout);

}  // namespace attnkit
