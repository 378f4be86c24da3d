// Tensor-parallel training without MPI: P threads each run forward + backward of
// gpt_tensor_parallel_shard (rank r of P) with GptModel's tensor-parallel sum emulated over a
// barrier (sum in rank order), then gpt_shard_sum_replicated_kv. The loss equals the whole
// model's; the shards' gradients, placed back with gpt_shard_to_full, equal the whole model's
// gradient (replicated tensors: every shard's copy bitwise equal); the shards' counted squares
// add up to the whole model's squared gradient norm. Hkv >= P and Hkv < P, with gates and sinks.
// The gradient tolerance is data-derived: a few times the change of the whole model's gradient
// when every weight moves by one float32 rounding step.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <thread>

#include "attnkit/core/parallel.hpp"
#include "attnkit/models/gpt_shard.hpp"
#include "models/tiny_tp_gpt.hpp"
#include "test_compare.hpp"

namespace attnkit {
namespace {

// tiny_tp_gpt with the gate computed from `source` and untied embeddings.
GptConfig untied_tp_gpt(int64_t kv_heads, GateMode gate, SinkLogits sink,
                        GateSource source = GateSource::kInput) {
  GptConfig c = testing::tiny_tp_gpt(kv_heads, gate, sink);
  c.gate_source = source, c.tie_word_embeddings = false;
  return c;
}

// x ← Σ over the P threads of x (same size on all), summed in rank order: every thread gets the
// same bits, as from an MPI all-reduce.
class EmulatedSum {
 public:
  explicit EmulatedSum(int64_t ranks) : parts_(size_t(ranks)), sync_(ranks) {}
  void operator()(int64_t rank, std::span<float> x) {
    parts_[size_t(rank)].assign(x.begin(), x.end());
    sync_.arrive_and_wait();
    for (size_t i = 0; i < x.size(); ++i) {
      float s = 0;
      for (const auto& p : parts_) s += p[i];
      x[i] = s;
    }
    sync_.arrive_and_wait();
  }

 private:
  std::vector<std::vector<float>> parts_;
  std::barrier<> sync_;
};

void expect_backward_matches(const GptConfig& cfg, int64_t ranks) {
  SCOPED_TRACE("Hkv " + std::to_string(cfg.num_key_value_heads) + " P " + std::to_string(ranks) + " gate " +
               std::to_string(int(cfg.gate)) + " sink " + std::to_string(int(cfg.sink_logits)));
  ThreadCountScope one(1);
  GptModel model(cfg);
  model.init_random(5);
  // Biases, sinks, gate biases non-zero; weights large enough that attention is far from
  // uniform (near-uniform attention makes the q/k gradients tiny cancellations).
  for (auto& x : model.parameters()) x = x * 8.0f + 0.02f;
  std::vector<int32_t> tokens, targets;
  for (int i = 0; i < 19; ++i) {
    tokens.push_back((i * 11 + 2) % 40);
    targets.push_back(i % 7 == 3 ? -1 : (i * 5 + 1) % 40);
  }
  const std::vector<int32_t> cu{0, 8, 19};  // two sequences
  model.zero_grad();
  const float loss = model.forward({tokens, cu}, targets);
  model.backward();
  double norm2 = 0;
  for (float g : model.gradients()) norm2 += double(g) * g;
  // The float32 noise floor of each gradient: the same model with every weight moved by one
  // rounding step (x·(1 ± 2⁻²⁴), alternating signs), as reordered float32 sums move intermediates.
  GptModel nudged(cfg);
  {
    std::copy(model.parameters().begin(), model.parameters().end(), nudged.parameters().begin());
    float sign = 1;
    for (auto& x : nudged.parameters()) x *= 1.0f + (sign = -sign) * 0x1p-24f;
    nudged.zero_grad();
    nudged.forward({tokens, cu}, targets);
    nudged.backward();
  }

  EmulatedSum sum(ranks);
  std::vector<float> losses(static_cast<size_t>(ranks));
  std::vector<double> squares(static_cast<size_t>(ranks));
  std::vector<std::vector<float>> unsynced(static_cast<size_t>(ranks)), grads(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      ThreadCountScope one_each(1);
      GptModel shard = gpt_tensor_parallel_shard(model, r, ranks);
      const auto hook = [&, r](std::span<float> x) { sum(r, x); };
      shard.set_tensor_parallel_sum(hook);
      shard.zero_grad();
      losses[size_t(r)] = shard.forward({tokens, cu}, targets);
      shard.backward();
      unsynced[size_t(r)].assign(shard.gradients().begin(), shard.gradients().end());
      gpt_shard_sum_replicated_kv(shard.gradients(), cfg, r, ranks, hook);
      grads[size_t(r)].assign(shard.gradients().begin(), shard.gradients().end());
      squares[size_t(r)] = gpt_shard_grad_sq_sum(shard.gradients(), gpt_shard_layout(cfg, r, ranks));
    });
  for (auto& t : threads) t.join();

  std::vector<float> full(model.gradients().size(), 0.0f), stale(full.size(), 0.0f);
  float stale_diff = 0;
  double squares_total = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    // Same loss to float32 rounding (the residual stream's sums are regrouped by shard).
    EXPECT_NEAR(losses[size_t(r)], loss, 2e-6 * std::abs(loss));
    const auto layout = gpt_shard_layout(cfg, r, ranks);
    EXPECT_EQ(gpt_shard_to_full(full, grads[size_t(r)], layout), 0.0f) << "rank " << r << ": replicas differ";
    stale_diff = std::max(stale_diff, gpt_shard_to_full(stale, unsynced[size_t(r)], layout));
    squares_total += squares[size_t(r)];
  }
  // Without the KV sum, replicas of a KV head hold different partial gradients (Hkv < P only).
  if (ranks > cfg.num_key_value_heads) {
    EXPECT_GT(stale_diff, 0.0f);
  }
  EXPECT_NEAR(squares_total, norm2, 1e-5 * norm2);
  // Each tensor: the whole model's gradient, up to float32 rounding of regrouped sums.
  for (const auto& p : model.parameter_info()) {
    double worst = 0, noise = 0, scale = 0;
    for (int64_t i = p.offset; i < p.offset + p.numel; ++i) {
      const double g = model.gradients()[size_t(i)];
      worst = worse_error(worst, std::abs(full[size_t(i)] - g));
      noise = worse_error(noise, std::abs(nudged.gradients()[size_t(i)] - g));
      scale = std::max(scale, std::abs(g));
    }
    // Measured: worst ≤ 2.6 × noise (layer-1 q/k and norms, where softmax's backward
    // dS = P∘(dP − rowsum(dO∘O)) cancels); a sharding error is O(1) relative (a missing shard's
    // share is at least 1/P of a sum).
    EXPECT_LE(worst, 8 * noise + 1e-7 * scale) << p.name << ": noise " << noise << ", scale " << scale;
  }
}

TEST(GptTpBackward, ShardGradientsSumToTheWholeModels) {
  for (int64_t ranks : {2, 4}) {
    expect_backward_matches(untied_tp_gpt(4, GateMode::kNone, SinkLogits::kNone), ranks);  // Hkv >= P
    expect_backward_matches(untied_tp_gpt(1, GateMode::kNone, SinkLogits::kNone), ranks);  // Hkv < P: replicated
    expect_backward_matches(untied_tp_gpt(2, GateMode::kHeadwise, SinkLogits::kLearned), ranks);
    expect_backward_matches(
        untied_tp_gpt(2, GateMode::kElementwise, SinkLogits::kOffByOne, GateSource::kQuery), ranks);
  }
}

TEST(GptTpBackward, LayoutRoundTrip) {
  const GptConfig cfg = untied_tp_gpt(1, GateMode::kHeadwise, SinkLogits::kLearned);
  GptModel model(cfg);
  model.init_random(3);
  for (int64_t ranks : {1, 2, 4}) {
    std::vector<float> back(model.parameters().size(), std::nanf(""));
    for (int64_t r = 0; r < ranks; ++r) {
      const GptModel shard = gpt_tensor_parallel_shard(model, r, ranks);
      const auto layout = gpt_shard_layout(cfg, r, ranks);
      int64_t covered = 0, counted = 0;
      for (const auto& run : layout) covered += run.size;
      EXPECT_EQ(covered, int64_t(shard.parameters().size()));
      gpt_shard_to_full(back, shard.parameters(), layout);
      (void)counted;
    }
    for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], model.parameters()[i]) << "P " << ranks << " at " << i;
  }
}

}  // namespace
}  // namespace attnkit
