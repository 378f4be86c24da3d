// Tensor-parallel shards of a GptModel: row blocks of q/k/v/gate/up projections, column blocks of
// o_proj and down_proj, per-head sinks and gates; everything else copied. The split is described
// once, as runs of the shard's flat buffer and their places in the whole model's
// (gpt_shard_layout), so weights, gradients and optimizer moments all move the same way.
#include "attnkit/models/gpt_shard.hpp"

#include <algorithm>
#include <cmath>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const std::string t(suffix);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

GptShardRange gpt_shard_range(const GptConfig& c, int64_t rank, int64_t ranks) {
  const int64_t H = c.num_attention_heads, Hkv = c.num_key_value_heads, F = c.intermediate_size;
  check(ranks >= 1 && rank >= 0 && rank < ranks, "--tp: rank ", rank, " of ", ranks, " is out of range");
  check(H % ranks == 0, "--tp: ", ranks, " must divide num_attention_heads (", H, ")");
  check(Hkv % ranks == 0 || ranks % Hkv == 0, "--tp: ", ranks, " must divide num_key_value_heads (", Hkv,
        ") or be a multiple of it");
  check(F >= ranks, "--tp: ", ranks, " exceeds intermediate_size (", F, ")");
  const int64_t G = H / Hkv, h0 = rank * (H / ranks), h1 = h0 + H / ranks;
  return {h0, h1, h0 / G, (h1 - 1) / G + 1, F * rank / ranks, F * (rank + 1) / ranks};
}

std::vector<GptShardRun> gpt_shard_layout(const GptConfig& c, int64_t rank, int64_t ranks) {
  const GptShardRange s = gpt_shard_range(c, rank, ranks);
  const int64_t D = c.head_dim, F = c.intermediate_size, Hkv = c.num_key_value_heads;
  GptConfig local = c;
  local.num_attention_heads = s.head_end - s.head_begin;
  local.num_key_value_heads = s.kv_end - s.kv_begin;
  local.intermediate_size = s.ffn_end - s.ffn_begin;
  const std::vector<ParameterInfo> full = gpt_parameter_layout(c);
  // When Hkv < P, shards [j·P/Hkv, (j+1)·P/Hkv) hold KV head j; the first of them counts it.
  const bool kv_replicated = ranks > Hkv;
  const bool kv_first = !kv_replicated || rank % (ranks / Hkv) == 0;
  std::vector<GptShardRun> runs;
  size_t k = 0;  // the shard's tensors are the whole model's, in the same order
  for (const auto& p : gpt_parameter_layout(local)) {
    while (k < full.size() && full[k].name != p.name) ++k;
    check(k < full.size(), "gpt_shard_layout: no tensor ", p.name, " in the whole model");
    const ParameterInfo& f = full[k];
    const int64_t cols = p.shape.size() == 2 ? p.shape[1] : 1;
    auto rows = [&](int64_t row_begin) {  // shard tensor = whole tensor's rows [row_begin, ...)
      runs.push_back({p.offset, f.offset + row_begin * cols, p.numel, false, true, false});
    };
    auto columns = [&](int64_t col_begin) {  // shard [R, n] = whole [R, N][:, col_begin : +n]
      for (int64_t r = 0; r < p.shape[0]; ++r)
        runs.push_back({p.offset + r * cols, f.offset + r * f.shape[1] + col_begin, cols, false, true, false});
    };
    const std::string& n = p.name;
    if (ends_with(n, "q_proj.weight") || ends_with(n, "q_proj.bias")) {
      rows(s.head_begin * D);
    } else if (ends_with(n, "k_proj.weight") || ends_with(n, "v_proj.weight") || ends_with(n, "k_proj.bias") ||
               ends_with(n, "v_proj.bias")) {
      runs.push_back({p.offset, f.offset + s.kv_begin * D * cols, p.numel, kv_replicated, kv_first, true});
    } else if (ends_with(n, "o_proj.weight")) {
      columns(s.head_begin * D);
    } else if (ends_with(n, "self_attn.sinks")) {
      rows(s.head_begin);
    } else if (ends_with(n, "output_gate.weight") || ends_with(n, "output_gate.bias")) {  // [H or H·D, in]
      rows(s.head_begin * (c.gate == GateMode::kHeadwise ? 1 : D));
    } else if (ends_with(n, "mlp.gate_proj.weight") || ends_with(n, "mlp.up_proj.weight")) {
      rows(s.ffn_begin);
    } else if (ends_with(n, "mlp.down_proj.weight")) {
      check(f.shape[1] == F, "gpt_shard_layout: unexpected shape of ", n);
      columns(s.ffn_begin);
    } else {  // embedding, norms, LM head: every shard holds all of it; shard 0 counts it
      check(p.numel == f.numel, "gpt_shard_layout: unexpected shape of ", n);
      runs.push_back({p.offset, f.offset, p.numel, ranks > 1, rank == 0, false});
    }
  }
  return runs;
}

GptModel gpt_tensor_parallel_shard(const GptModel& full, int64_t rank, int64_t ranks) {
  const GptConfig& c = full.config();
  const GptShardRange s = gpt_shard_range(c, rank, ranks);
  GptConfig local = c;
  local.num_attention_heads = s.head_end - s.head_begin;
  local.num_key_value_heads = s.kv_end - s.kv_begin;
  local.intermediate_size = s.ffn_end - s.ffn_begin;
  GptModel shard(local);
  gpt_shard_from_full(shard.parameters(), full.parameters(), gpt_shard_layout(c, rank, ranks));
  return shard;
}

void gpt_shard_sum_replicated_kv(std::span<float> grads, const GptConfig& c, int64_t rank, int64_t ranks,
                                 const std::function<void(std::span<float>)>& sum) {
  const int64_t Hkv = c.num_key_value_heads;
  if (ranks <= Hkv) return;  // every KV head lives on one shard: its gradient is complete
  // Each shard holds one KV head (kv_begin): its k/v runs go to that head's slot of a buffer
  // [Hkv, kv values per shard]; the sum over shards adds the replicas' partial gradients.
  const std::vector<GptShardRun> layout = gpt_shard_layout(c, rank, ranks);
  const int64_t head = gpt_shard_range(c, rank, ranks).kv_begin;
  int64_t per_head = 0;
  for (const auto& r : layout)
    if (r.kv) per_head += r.size;
  std::vector<float> buffer(size_t(Hkv * per_head), 0.0f);
  int64_t at = head * per_head;
  for (const auto& r : layout)
    if (r.kv) at = std::copy_n(grads.begin() + r.shard_offset, r.size, buffer.begin() + at) - buffer.begin();
  sum(buffer);
  at = head * per_head;
  for (const auto& r : layout)
    if (r.kv) {
      std::copy_n(buffer.begin() + at, r.size, grads.begin() + r.shard_offset);
      at += r.size;
    }
}

double gpt_shard_grad_sq_sum(std::span<const float> grads, const std::vector<GptShardRun>& layout) {
  double total = 0;
  for (const auto& r : layout) {
    if (!r.counted) continue;
    double s = 0;
    for (int64_t i = 0; i < r.size; ++i) s += double(grads[size_t(r.shard_offset + i)]) * grads[size_t(r.shard_offset + i)];
    total += s;
  }
  return total;
}

float gpt_shard_to_full(std::span<float> full, std::span<const float> shard, const std::vector<GptShardRun>& layout) {
  float worst = 0;
  for (const auto& r : layout) {
    const float* src = shard.data() + r.shard_offset;
    float* dst = full.data() + r.full_offset;
    if (r.replicated && !r.counted)  // a later replica: the first holder (lower rank) wrote it
      for (int64_t i = 0; i < r.size; ++i) worst = std::max(worst, std::abs(dst[i] - src[i]));
    std::copy_n(src, r.size, dst);
  }
  return worst;
}

void gpt_shard_from_full(std::span<float> shard, std::span<const float> full, const std::vector<GptShardRun>& layout) {
  for (const auto& r : layout) std::copy_n(full.data() + r.full_offset, r.size, shard.data() + r.shard_offset);
}

}  // namespace attnkit
