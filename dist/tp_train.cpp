// Tensor-parallel training: a GptModel shard with an MPI all-reduce, whole-model gradient norm,
// KV-replica gradient sums, and checkpoints gathered into one ordinary whole-model directory.
#include "attnkit/dist/tp_train.hpp"

#include <cmath>

#include "attnkit/core/error.hpp"
#include "attnkit/dist/mpi.hpp"

namespace attnkit::dist {
namespace {

void sum_over_ranks(std::span<float> x) { all_reduce_sum(x); }

// AdamW's moments as two flat buffers in parameter layout (m, then v), or back.
std::vector<float> flat_moments(AdamW& opt, int which) {
  std::vector<float> out;
  const auto state = opt.state();
  for (size_t i = size_t(which); i < state.size(); i += 2) out.insert(out.end(), state[i].data.begin(), state[i].data.end());
  return out;
}
void set_moments(AdamW& opt, int which, std::span<const float> flat) {
  const auto state = opt.state();
  size_t at = 0;
  for (size_t i = size_t(which); i < state.size(); i += 2) {
    check(at + state[i].data.size() <= flat.size(), "--tp: optimizer state of the wrong size");
    std::copy_n(flat.begin() + at, state[i].data.size(), state[i].data.begin());
    at += state[i].data.size();
  }
  check(at == flat.size(), "--tp: optimizer state of the wrong size");
}

}  // namespace

TpTraining::TpTraining(const GptModel& full, int rank, int ranks)
    : full_config_(full.config()), rank_(rank), ranks_(ranks),
      layout_(gpt_shard_layout(full.config(), rank, ranks)),
      shard_(gpt_tensor_parallel_shard(full, rank, ranks)) {
  for (int r = 0; r < ranks; ++r) {
    int64_t n = 0;
    for (const auto& run : gpt_shard_layout(full_config_, r, ranks)) n += run.size;
    shard_sizes_.push_back(n);
  }
  check(shard_sizes_[size_t(rank)] == int64_t(shard_.parameters().size()), "--tp: shard layout mismatch");
  shard_.set_tensor_parallel_sum(sum_over_ranks);
}

void TpTraining::configure(TrainOptions& o) {
  o.tp_rank = rank_;
  o.tp_sync_gradients = [this] {
    gpt_shard_sum_replicated_kv(shard_.gradients(), full_config_, rank_, ranks_, sum_over_ranks);
  };
  o.tp_grad_norm = [this] {  // Σ over ranks of each rank's counted squares: each value once
    return std::sqrt(all_reduce_sum(gpt_shard_grad_sq_sum(shard_.gradients(), layout_)));
  };
  o.tp_save = [this](AdamW& opt, const std::string& dir) { save(opt, dir); };
  o.tp_load = [this](AdamW& opt, const std::string& dir) { load(opt, dir); };
}

std::vector<float> TpTraining::gather(std::span<const float> mine) const {
  check(int64_t(mine.size()) == shard_sizes_[size_t(rank_)], "--tp: gather of a buffer of the wrong size");
  int64_t total = 0;
  for (int64_t n : shard_sizes_) total += n;
  std::vector<float> all(rank_ == 0 ? size_t(total) : 0);
  dist::gather(mine, all, shard_sizes_, 0);
  if (rank_ != 0) return {};
  const std::vector<ParameterInfo> info = gpt_parameter_layout(full_config_);
  std::vector<float> full(size_t(info.back().offset + info.back().numel), 0.0f);
  int64_t at = 0;
  for (int r = 0; r < ranks_; ++r) {  // rank order: each replica's first holder writes first
    const float diff = gpt_shard_to_full(full, std::span<const float>(all).subspan(size_t(at), size_t(shard_sizes_[size_t(r)])),
                                         gpt_shard_layout(full_config_, r, ranks_));
    check(diff == 0, "--tp: rank ", r, " holds replicated values that differ from a lower rank's by up to ", diff,
          " (the ranks fell out of step)");
    at += shard_sizes_[size_t(r)];
  }
  return full;
}

void TpTraining::save(AdamW& optimizer, const std::string& dir) const {
  const std::vector<float> weights = gather(shard_.parameters());
  const std::vector<float> m = gather(flat_moments(optimizer, 0));
  const std::vector<float> v = gather(flat_moments(optimizer, 1));
  if (rank_ != 0) return;
  GptModel full(full_config_);
  std::copy(weights.begin(), weights.end(), full.parameters().begin());
  for (float x : weights) check(std::isfinite(x), "--tp: a gathered parameter is not finite");
  AdamW whole(named_parameters(full), optimizer.options());
  set_moments(whole, 0, m);
  set_moments(whole, 1, v);
  whole.set_step_count(optimizer.step_count());
  full.save(dir);
  whole.save_state(dir + "/optimizer.safetensors");
}

void TpTraining::load(AdamW& optimizer, const std::string& dir) {
  GptModel full = GptModel::load(dir);
  check(gpt_config_to_json(full.config()) == gpt_config_to_json(full_config_), "resume: the checkpoint in ", dir,
        " has a different model config than this run");
  AdamW whole(named_parameters(full), optimizer.options());
  whole.load_state(dir + "/optimizer.safetensors");
  gpt_shard_from_full(shard_.parameters(), full.parameters(), layout_);
  for (int which : {0, 1}) {
    const std::vector<float> all = flat_moments(whole, which);
    std::vector<float> mine(shard_.parameters().size());
    gpt_shard_from_full(mine, all, layout_);
    set_moments(optimizer, which, mine);
  }
  optimizer.set_step_count(whole.step_count());
}

}  // namespace attnkit::dist
