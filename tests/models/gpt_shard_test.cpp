// Tensor-parallel shards without MPI: P threads each run a GptGenerator on gpt_tensor_parallel_shard
// (rank r of P) with an all-reduce over a barrier (sum in rank order); every step's logits equal
// the whole model's within float32 rounding, for Hkv >= P and Hkv < P (replicated KV heads), with
// gates and sinks sliced per head; each shard's cache holds its KV heads only.
#include "attnkit/models/gpt_shard.hpp"

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <thread>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/models/gpt_generate.hpp"
#include "models/tiny_tp_gpt.hpp"
#include "test_compare.hpp"

namespace attnkit {
namespace {

using testing::tiny_tp_gpt;

// Logits [steps, V] of the whole model and of P shards in threads, fed the same tokens.
void expect_shards_match(const GptConfig& cfg, int64_t ranks) {
  GptModel model(cfg);
  model.init_random(5);
  for (auto& x : model.parameters()) x += 0.02f;  // biases, sinks, gate biases non-zero
  std::vector<int32_t> tokens;
  for (int i = 0; i < 20; ++i) tokens.push_back((i * 11 + 2) % 40);
  std::vector<std::vector<float>> whole;
  {
    GptGenerator gen(model, {.capacity = 32, .temperature = 0});
    for (int32_t t : tokens) {
      const auto l = gen.feed(t);
      whole.emplace_back(l.begin(), l.end());
    }
  }
  const int64_t C = cfg.hidden_size;
  std::vector<std::vector<float>> partial(static_cast<size_t>(ranks), std::vector<float>(static_cast<size_t>(C)));
  std::barrier sync(ranks);
  std::vector<std::vector<std::vector<float>>> logits(static_cast<size_t>(ranks));
  std::vector<int64_t> cache_bytes(static_cast<size_t>(ranks));
  // Each shard runs single-threaded. The override is process-wide and its scopes must nest, so
  // it is set once here: one scope per shard thread would restore the saved values out of order
  // and leave the override set after the test.
  const ThreadCountScope one(1);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const GptModel shard = gpt_tensor_parallel_shard(model, r, ranks);
      GenerateOptions o{.capacity = 32, .temperature = 0};
      o.all_reduce = [&, r](std::span<float> x) {
        std::copy(x.begin(), x.end(), partial[size_t(r)].begin());
        sync.arrive_and_wait();
        for (int64_t i = 0; i < C; ++i) {
          float s = 0;
          for (int64_t q = 0; q < ranks; ++q) s += partial[size_t(q)][size_t(i)];
          x[size_t(i)] = s;
        }
        sync.arrive_and_wait();
      };
      GptGenerator gen(shard, o);
      for (int32_t t : tokens) {
        const auto l = gen.feed(t);
        logits[size_t(r)].emplace_back(l.begin(), l.end());
      }
      cache_bytes[size_t(r)] = gen.cache().nbytes();
    });
  for (auto& t : threads) t.join();
  const int64_t kv_per_shard = std::max<int64_t>(1, cfg.num_key_value_heads / ranks);
  for (int64_t r = 0; r < ranks; ++r) {
    double worst = 0, scale = 0;
    for (size_t s = 0; s < tokens.size(); ++s)
      for (size_t v = 0; v < whole[s].size(); ++v) {
        worst = worse_error(worst, std::abs(double(logits[size_t(r)][s][v]) - whole[s][v]));
        scale = std::max(scale, std::abs(double(whole[s][v])));
      }
    // Same arithmetic, partial sums regrouped by shard: float32 rounding.
    EXPECT_LT(worst, 1e-5 * std::max(1.0, scale)) << "Hkv " << cfg.num_key_value_heads << " P " << ranks;
    EXPECT_EQ(cache_bytes[size_t(r)], 2 * cfg.num_hidden_layers * kv_per_shard * cfg.head_dim * 4 * 32);
  }
}

TEST(GptShard, ShardsSumToTheWholeModel) {
  for (int64_t ranks : {2, 4}) {
    expect_shards_match(tiny_tp_gpt(4, GateMode::kNone, SinkLogits::kNone), ranks);       // Hkv >= P
    expect_shards_match(tiny_tp_gpt(1, GateMode::kNone, SinkLogits::kNone), ranks);       // Hkv < P: replicated
    expect_shards_match(tiny_tp_gpt(2, GateMode::kHeadwise, SinkLogits::kLearned), ranks);
    expect_shards_match(tiny_tp_gpt(2, GateMode::kElementwise, SinkLogits::kOffByOne), ranks);
  }
}

TEST(GptShard, RangesAndRefusals) {
  const GptConfig c = tiny_tp_gpt(2, GateMode::kNone, SinkLogits::kNone);
  const GptShardRange r = gpt_shard_range(c, 3, 4);  // heads 3..4 read KV head 1
  EXPECT_EQ(r.head_begin, 3);
  EXPECT_EQ(r.head_end, 4);
  EXPECT_EQ(r.kv_begin, 1);
  EXPECT_EQ(r.kv_end, 2);
  EXPECT_EQ(r.ffn_begin, 22);
  EXPECT_EQ(r.ffn_end, 30);
  EXPECT_THROW(gpt_shard_range(c, 0, 3), Error);  // 3 does not divide H = 4
  EXPECT_THROW(gpt_shard_range(c, 4, 4), Error);
  GptConfig six = tiny_tp_gpt(2, GateMode::kNone, SinkLogits::kNone);
  six.num_attention_heads = 12, six.num_key_value_heads = 3;
  EXPECT_THROW(gpt_shard_range(six, 0, 2), Error);  // Hkv = 3 vs P = 2: neither divides
}

}  // namespace
}  // namespace attnkit
