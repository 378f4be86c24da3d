// Streaming evaluation: the dense stream inside the context equals evaluate_loss (`attnkit eval`);
// the sink cache holds exactly the first sink_tokens and the last W tokens (positions and K/V contents);
// the window cache the last W; recompute with a window that holds everything equals dense.
#include "attnkit/tools/stream_eval.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/core/error.hpp"
#include "attnkit/models/gpt_generate.hpp"
#include "attnkit/train/gpt_trainer.hpp"

namespace attnkit {
namespace {

GptModel tiny_model(SinkLogits sink) {
  GptConfig c;
  c.vocab_size = 40, c.hidden_size = 24, c.intermediate_size = 40, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 6;
  c.max_position_embeddings = 32, c.sink_logits = sink;
  GptModel m(c);
  m.init_random(9);
  for (auto& x : m.parameters()) x *= 5.0f;  // a model whose predictions depend on the context
  return m;
}

std::vector<int32_t> eval_tokens(int64_t n) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t((i * 13 + i * i % 7) % 40));
  return t;
}

TEST(StreamEval, DenseInsideTheContextEqualsEvaluateLoss) {
  for (SinkLogits s : {SinkLogits::kNone, SinkLogits::kOffByOne}) {
    GptModel m = tiny_model(s);
    const auto tokens = eval_tokens(33);  // one window of 32 inputs + 1 target
    const double eval = evaluate_loss(m, tokens, 32, 1);
    const StreamEvalResult r = stream_eval(m, tokens, {.policy = KVPolicy::dense, .tokens = 33});
    ASSERT_EQ(r.nll.size(), 32u);
    // One token at a time against a cache vs one packed forward: float32 rounding of O(1) losses.
    EXPECT_NEAR(r.mean_nll(), eval, 1e-5 * std::max(1.0, eval));
    const StreamEvalResult rc = stream_eval(m, tokens, {.policy = KVPolicy::recompute, .window = 32, .tokens = 33});
    for (size_t t = 0; t < r.nll.size(); ++t) EXPECT_NEAR(rc.nll[t], r.nll[t], 1e-5 * std::max(1.0, r.nll[t]));
  }
}

TEST(StreamEval, SinkCacheKeepsTheFirstAndTheLastTokens) {
  GptModel m = tiny_model(SinkLogits::kNone);
  const auto tokens = eval_tokens(80);
  const int64_t N = 3, W = 10, fed = 79;
  const StreamEvalResult r = stream_eval(m, tokens, {.policy = KVPolicy::sink, .window = W, .sink_tokens = N, .tokens = 80});
  std::vector<int64_t> expect{0, 1, 2};
  for (int64_t p = fed - W; p < fed; ++p) expect.push_back(p);
  EXPECT_EQ(r.cache_positions, expect);
  const StreamEvalResult w = stream_eval(m, tokens, {.policy = KVPolicy::window, .window = W, .tokens = 80});
  EXPECT_EQ(w.cache_positions, std::vector<int64_t>(expect.begin() + N, expect.end()));
  // Contents: layer 0's K and V depend only on the token, so the sink cache's rows equal a dense
  // cache's rows at the same stream positions.
  GptGenerator sink(m, {.sink_tokens = N, .window = W, .temperature = 0});
  GptGenerator dense(m, {.capacity = fed, .temperature = 0});
  for (int64_t t = 0; t < fed; ++t) sink.feed(tokens[size_t(t)]), dense.feed(tokens[size_t(t)]);
  const int64_t Hkv = 2, D = 6;
  Tensor<float, 3> ks({N + W, Hkv, D}), vs({N + W, Hkv, D}), kd({fed, Hkv, D}), vd({fed, Hkv, D});
  sink.cache().gather(0, 0, ks.view(), vs.view());
  dense.cache().gather(0, 0, kd.view(), vd.view());
  for (size_t i = 0; i < expect.size(); ++i)
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t d = 0; d < D; ++d) {
        EXPECT_EQ(ks.view()(int64_t(i), h, d), kd.view()(expect[i], h, d));
        EXPECT_EQ(vs.view()(int64_t(i), h, d), vd.view()(expect[i], h, d));
      }
  // Past the sink window the policies see different contexts, so their losses differ.
  EXPECT_NE(r.nll.back(), w.nll.back());
}

TEST(StreamEval, RejectsBadOptions) {
  GptModel m = tiny_model(SinkLogits::kNone);
  const auto tokens = eval_tokens(20);
  EXPECT_THROW(stream_eval(m, tokens, {.tokens = 21}), Error);
  EXPECT_THROW(stream_eval(m, tokens, {.tokens = 1}), Error);
  EXPECT_THROW(stream_eval(m, tokens, {.window = -1, .tokens = 10}), Error);
  EXPECT_THROW(stream_eval(m, tokens, {.policy = KVPolicy::recompute, .window = 33, .tokens = 10}), Error);
  EXPECT_THROW(parse_kv_policy("lru"), Error);
  EXPECT_THROW(stream_eval(m, tokens, {.policy = KVPolicy::paged, .tokens = 10}), Error);  // a cache layout, not a stream policy
  // A dense cache sized for the stream runs past the model's context (32): allowed, honestly worse.
  EXPECT_EQ(stream_eval(m, eval_tokens(40), {.policy = KVPolicy::dense, .tokens = 40}).nll.size(), 39u);
}

}  // namespace
}  // namespace attnkit

namespace attnkit {
namespace {

// Register tokens (attnkit_registers = k): the ids V-k..V-1 open every stream and every
// evaluation window, unscored; the sink policy with sink_tokens = k keeps exactly them.
TEST(StreamEval, RegistersOpenTheStreamAndTheEvalWindows) {
  GptConfig c;
  c.vocab_size = 42, c.hidden_size = 24, c.intermediate_size = 40, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 6;
  c.max_position_embeddings = 32, c.registers = 2;
  EXPECT_EQ(gpt_register_ids(c), (std::vector<int32_t>{40, 41}));
  EXPECT_EQ(parse_gpt_config(gpt_config_to_json(c)).registers, 2);
  GptModel m(c);
  m.init_random(4);
  for (auto& x : m.parameters()) x *= 5.0f;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 31; ++i) tokens.push_back((i * 13 + i * i % 7) % 40);
  // Direct: one forward over [40, 41, tokens[0..29]], losses of positions 2.. against tokens[1..30].
  std::vector<int32_t> input{40, 41}, targets{-1, -1};
  input.insert(input.end(), tokens.begin(), tokens.end() - 1);
  targets.insert(targets.end(), tokens.begin() + 1, tokens.end());
  const double direct = m.forward({input, {}}, targets);
  EXPECT_NEAR(evaluate_loss(m, tokens, 32, 1), direct, 1e-6 * std::max(1.0, direct));
  const StreamEvalResult dense = stream_eval(m, tokens, {.policy = KVPolicy::dense, .tokens = 31});
  EXPECT_NEAR(dense.mean_nll(), direct, 1e-5 * std::max(1.0, direct));
  const StreamEvalResult sink = stream_eval(m, tokens, {.policy = KVPolicy::sink, .window = 5, .sink_tokens = 2, .tokens = 31});
  EXPECT_EQ(sink.cache_positions, (std::vector<int64_t>{0, 1, 27, 28, 29, 30, 31}));  // 2 + 30 fed
  c.registers = 32;  // no room left in the context
  EXPECT_THROW(validate(c), Error);
}

}  // namespace
}  // namespace attnkit
