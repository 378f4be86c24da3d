// Generation with a KV cache equals the full forward: the logits of every decode step match the
// model's logits at that position, for plain, gated and sink configurations.
#include "attnkit/models/gpt_generate.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "attnkit/core/error.hpp"
#include "test_errors.hpp"
#include "test_compare.hpp"

namespace attnkit {
namespace {

GptConfig tiny(GateMode gate, GateSource source, SinkLogits sink, int64_t window) {
  GptConfig c;
  c.vocab_size = 40, c.hidden_size = 24, c.intermediate_size = 40, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 6;
  c.max_position_embeddings = 64;
  c.gate = gate, c.gate_source = source, c.sink_logits = sink, c.window = window;
  return c;
}

// Plain, head-wise gate + learned sinks, element-wise query gate + off-by-one with a window.
std::vector<GptConfig> variants() {
  return {tiny(GateMode::kNone, GateSource::kInput, SinkLogits::kNone, -1),
          tiny(GateMode::kHeadwise, GateSource::kInput, SinkLogits::kLearned, -1),
          tiny(GateMode::kElementwise, GateSource::kQuery, SinkLogits::kOffByOne, 5)};
}

// Calls set(values) on parameter "model.layers.L.<suffix>" of every layer L that has it.
template <class Set>
void set_in_every_layer(GptModel& model, const std::string& suffix, const Set& set) {
  for (int64_t l = 0; l < model.config().num_hidden_layers; ++l)
    for (const auto& p : model.parameter_info())
      if (p.name == "model.layers." + std::to_string(l) + "." + suffix) set(model.parameter(p.name));
}

// The model's full-forward logits for `tokens`; compare() records the largest deviation of a
// step's logits from row t, and the largest logit, for the float32-rounding bar.
struct FullForward {
  Tensor<float, 2> full;
  double worst = 0, scale = 0;
  FullForward(GptModel& model, const std::vector<int32_t>& tokens)
      : full({int64_t(tokens.size()), model.config().vocab_size}) {
    model.logits({tokens, {}}, full.view());
  }
  void compare(std::span<const float> got, int64_t t) {
    for (int64_t v = 0; v < full.shape()[1]; ++v) {
      worst = worse_error(worst, std::abs(double(got[size_t(v)]) - full.view()(t, v)));
      scale = std::max(scale, std::abs(double(full.view()(t, v))));
    }
  }
};

TEST(GptGenerate, DecodeStepsEqualTheFullForward) {
  for (const auto& cfg : variants()) {
    GptModel model(cfg);
    model.init_random(3);
    for (auto name : {"self_attn.sinks", "self_attn.output_gate.bias"})  // make them matter
      set_in_every_layer(model, name, [](std::span<float> v) { std::fill(v.begin(), v.end(), 0.7f); });
    std::vector<int32_t> tokens;
    for (int i = 0; i < 30; ++i) tokens.push_back((i * 7 + 3) % 40);
    FullForward ref(model, tokens);
    GptGenerator gen(model, {.temperature = 0});
    for (int64_t t = 0; t < 30; ++t) ref.compare(gen.feed(tokens[size_t(t)]), t);
    // Same arithmetic in a different order (one token vs a packed batch): float32 rounding.
    EXPECT_LT(ref.worst, 1e-5 * std::max(1.0, ref.scale)) << "gate " << int(cfg.gate) << " sink " << int(cfg.sink_logits);
  }
}

// Batched prefill: chunks of several tokens (causal among themselves, against the cache) give the
// full forward's logits after each chunk, and single-token steps after them still match.
TEST(GptGenerate, BatchedStepsEqualTheFullForward) {
  for (const auto& cfg : variants()) {
    GptModel model(cfg);
    model.init_random(4);
    set_in_every_layer(model, "self_attn.sinks", [](std::span<float> v) { v[0] = 0.7f; });
    std::vector<int32_t> tokens;
    for (int i = 0; i < 34; ++i) tokens.push_back((i * 11 + 5) % 40);
    FullForward ref(model, tokens);
    GptGenerator gen(model, {.temperature = 0});
    int64_t at = 0;
    for (int64_t n : {1, 5, 11, 13}) {  // 30 tokens in batched steps
      ref.compare(gen.feed_tokens(std::span<const int32_t>(tokens).subspan(size_t(at), size_t(n))), at + n - 1);
      at += n;
    }
    for (; at < 34; ++at) ref.compare(gen.feed(tokens[size_t(at)]), at);
    EXPECT_EQ(gen.position(), 34);
    EXPECT_EQ(gen.cache().cached(0, 1), 34);
    EXPECT_LT(ref.worst, 1e-5 * std::max(1.0, ref.scale)) << "gate " << int(cfg.gate) << " sink " << int(cfg.sink_logits);
  }
}

// A prompt longer than a sink + window cache: batched while nothing is evicted, then one token at
// a time, so it ends where feeding token by token ends.
TEST(GptGenerate, PromptPastASinkCacheEqualsTokenByToken) {
  GptModel model(tiny(GateMode::kNone, GateSource::kInput, SinkLogits::kNone, -1));
  model.init_random(5);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 50; ++i) prompt.push_back((i * 13 + 1) % 40);
  const GenerateOptions o{.sink_tokens = 2, .window = 10, .temperature = 0};
  GptGenerator batched(model, o), single(model, o);
  const auto a = batched.feed_prompt(prompt);
  std::span<const float> b;
  for (int32_t t : prompt) b = single.feed(t);
  double worst = 0;
  for (size_t v = 0; v < a.size(); ++v) worst = worse_error(worst, std::abs(double(a[v]) - b[v]));
  EXPECT_LT(worst, 1e-5);
  EXPECT_EQ(batched.position(), 50);
  EXPECT_EQ(batched.cache().positions(0, 0), single.cache().positions(0, 0));
}

TEST(GptGenerate, BadBatchedStepsThrowAndChangeNothing) {
  GptModel model(tiny(GateMode::kNone, GateSource::kInput, SinkLogits::kNone, -1));
  model.init_random(6);
  GptGenerator sink(model, {.sink_tokens = 2, .window = 6, .temperature = 0});
  const std::vector<int32_t> eight{1, 2, 3, 4, 5, 6, 7, 8}, nine{1, 2, 3, 4, 5, 6, 7, 8, 9};
  sink.feed_tokens(eight);                     // exactly fills the 8 slots
  EXPECT_THROW(sink.feed_tokens({eight.data(), 2}), Error);  // would evict keys the first one sees
  EXPECT_EQ(sink.position(), 8);
  GptGenerator dense(model, {.capacity = 8, .temperature = 0});
  EXPECT_THROW(dense.feed_tokens(nine), Error);  // past the dense capacity
  const std::vector<int32_t> bad{1, 40};
  EXPECT_THROW(dense.feed_tokens(bad), Error);   // a token out of range
  EXPECT_THROW(dense.feed_tokens({}), Error);
  EXPECT_EQ(dense.position(), 0);
  EXPECT_EQ(dense.cache().cached(0, 0), 0);
}

// sample() takes the model's [V] logits: more of them were read into a [V] buffer past its end,
// none gave a null read, and NaN logits a silently skewed draw.
TEST(GptGenerate, SampleRefusesLogitsThatAreNotAModelsRow) {
  GptModel model(tiny(GateMode::kNone, GateSource::kInput, SinkLogits::kNone, -1));
  model.init_random(6);
  for (const float temperature : {0.0f, 1.0f}) {
    GptGenerator gen(model, {.capacity = 8, .temperature = temperature, .top_k = 5});
    std::vector<float> logits(40, 0.0f);
    logits[7] = 50.0f;
    EXPECT_EQ(gen.sample(logits), 7);
    const std::vector<float> longer(4096, 0.0f);
    expect_error([&] { gen.sample(longer); }, "sample: logits: expected [V] = 40 entries, got 4096");
    expect_error([&] { gen.sample({}); }, "expected [V] = 40 entries, got 0");
    logits[3] = NAN;
    expect_error([&] { gen.sample(logits); }, "sample: logits[3] = nan: must be finite or -inf");
    std::fill(logits.begin(), logits.end(), -INFINITY);
    expect_error([&] { gen.sample(logits); }, "every entry is -inf");
    logits[11] = 0.0f;  // one finite entry among -inf: that token
    EXPECT_EQ(gen.sample(logits), 11);
  }
}

TEST(GptGenerate, SinkCacheKeepsConstantMemoryPastTheDenseCapacity) {
  GptModel model(tiny(GateMode::kNone, GateSource::kInput, SinkLogits::kNone, -1));
  model.init_random(1);
  GptGenerator dense(model, {.capacity = 16, .temperature = 0});
  for (int i = 0; i < 16; ++i) dense.feed(i % 40);
  EXPECT_THROW(dense.feed(1), Error);  // a dense cache is full at its capacity
  GptGenerator stream(model, {.sink_tokens = 4, .window = 12, .seed = 5});
  const int64_t bytes = stream.cache().nbytes();
  int32_t tok = 1;
  for (int i = 0; i < 500; ++i) tok = stream.sample(stream.feed(tok));
  EXPECT_EQ(stream.position(), 500);
  EXPECT_EQ(stream.cache().nbytes(), bytes);
  EXPECT_EQ(stream.cache().cached(0, 0), 16);
}

}  // namespace
}  // namespace attnkit

namespace attnkit {
namespace {

TEST(GptGenerate, FillCacheRandomAdvancesTheCache) {
  GptModel model(tiny(GateMode::kNone, GateSource::kInput, SinkLogits::kNone, -1));
  model.init_random(1);
  GptGenerator gen(model, {.capacity = 16, .temperature = 0});
  gen.fill_cache_random(10, 3);
  EXPECT_EQ(gen.position(), 10);
  EXPECT_EQ(gen.cache().cached(0, 1), 10);
  const auto logits = gen.feed(2);
  for (float x : logits) EXPECT_TRUE(std::isfinite(x));
  EXPECT_EQ(gen.cache().cached(0, 0), 11);
  EXPECT_THROW(gen.fill_cache_random(6, 3), Error);  // 11 + 6 > 16
}

}  // namespace
}  // namespace attnkit
