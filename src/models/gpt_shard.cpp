// Tensor-parallel shards of a GptModel: row blocks of q/k/v/gate/up projections, column blocks of
// o_proj and down_proj, per-head sinks and gates; everything else copied.
#include "attnkit/models/gpt_shard.hpp"

#include <algorithm>

#include "attnkit/core/error.hpp"

namespace attnkit {
namespace {

// dst[r, :] = src[row_begin + r, :] for a [rows, cols] tensor (1-D: cols = 1).
void copy_rows(std::span<float> dst, std::span<const float> src, int64_t row_begin, int64_t cols) {
  std::copy_n(src.begin() + row_begin * cols, dst.size(), dst.begin());
}

// dst[r, c] = src[r, col_begin + c] for src [rows, src_cols], dst [rows, dst_cols].
void copy_cols(std::span<float> dst, std::span<const float> src, int64_t src_cols, int64_t col_begin,
               int64_t dst_cols) {
  const int64_t rows = int64_t(dst.size()) / dst_cols;
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(src.begin() + r * src_cols + col_begin, dst_cols, dst.begin() + r * dst_cols);
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

GptModel gpt_tensor_parallel_shard(const GptModel& full, int64_t rank, int64_t ranks) {
  const GptConfig& c = full.config();
  const GptShardRange s = gpt_shard_range(c, rank, ranks);
  const int64_t D = c.head_dim, C = c.hidden_size, F = c.intermediate_size;
  GptConfig local = c;
  local.num_attention_heads = s.head_end - s.head_begin;
  local.num_key_value_heads = s.kv_end - s.kv_begin;
  local.intermediate_size = s.ffn_end - s.ffn_begin;
  GptModel shard(local);
  const std::string prefix = "model.layers.";
  for (const auto& p : shard.parameter_info()) {
    const std::span<float> dst = shard.parameter(p.name);
    const std::span<const float> src = full.vec(p.name);
    const auto ends = [&](const char* suffix) {
      const std::string s2(suffix);
      return p.name.size() >= s2.size() && p.name.compare(p.name.size() - s2.size(), s2.size(), s2) == 0;
    };
    const int64_t cols = p.shape.size() == 2 ? p.shape[1] : 1;
    if (ends("q_proj.weight") || ends("q_proj.bias")) {
      copy_rows(dst, src, s.head_begin * D, cols);
    } else if (ends("k_proj.weight") || ends("v_proj.weight") || ends("k_proj.bias") || ends("v_proj.bias")) {
      copy_rows(dst, src, s.kv_begin * D, cols);
    } else if (ends("o_proj.weight")) {
      copy_cols(dst, src, c.num_attention_heads * D, s.head_begin * D, local.num_attention_heads * D);
    } else if (ends("self_attn.sinks")) {
      copy_rows(dst, src, s.head_begin, 1);
    } else if (ends("output_gate.weight") || ends("output_gate.bias")) {  // [H or H·D, in]
      copy_rows(dst, src, s.head_begin * (c.gate == GateMode::kHeadwise ? 1 : D), cols);
    } else if (ends("mlp.gate_proj.weight") || ends("mlp.up_proj.weight")) {
      copy_rows(dst, src, s.ffn_begin, C);
    } else if (ends("mlp.down_proj.weight")) {
      copy_cols(dst, src, F, s.ffn_begin, local.intermediate_size);
    } else {
      check(dst.size() == src.size(), "gpt_tensor_parallel_shard: unexpected shape of ", p.name);
      std::copy(src.begin(), src.end(), dst.begin());
    }
  }
  return shard;
}

}  // namespace attnkit
