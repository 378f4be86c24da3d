// AdamW: ten steps against a float64 transcription of the update (with weight decay, an excluded
// parameter and a changing lr), the first step by hand, the decay predicate, checkpoint
// save/load resuming bit-exactly, thread-count invariance and argument errors.
#include "attnkit/train/adamw.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/core/weight_pack_cache.hpp"

namespace attnkit {
namespace {

struct Params {
  std::vector<std::vector<float>> value, grad;
  explicit Params(const std::vector<size_t>& sizes, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n01;
    for (size_t n : sizes) {
      value.emplace_back(n);
      grad.emplace_back(n);
      for (float& x : value.back()) x = n01(rng);
    }
  }
  void new_grads(std::mt19937& rng) {
    std::normal_distribution<float> n01;
    for (auto& g : grad)
      for (float& x : g) x = n01(rng);
  }
  std::vector<NamedParameter> named(const std::vector<std::string>& names) {
    std::vector<NamedParameter> out;
    for (size_t i = 0; i < names.size(); ++i) out.push_back({names[i], value[i], grad[i]});
    return out;
  }
};

TEST(AdamW, FirstStepByHand) {
  // t = 1: m̂ = g, v̂ = g², so p ← p(1 − lr·wd) − lr·g/(|g| + eps).
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, -4.0f};
  AdamW opt({{"w", p, g}}, {.weight_decay = 0.1});
  opt.step(0.01);
  EXPECT_NEAR(p[0], 1.0 * (1 - 0.001) - 0.01 * 0.5 / (0.5 + 1e-8), 1e-6);
  EXPECT_NEAR(p[1], -2.0 * (1 - 0.001) + 0.01 * 4.0 / (4.0 + 1e-8), 1e-6);
  EXPECT_EQ(opt.step_count(), 1);
}

TEST(AdamW, RefusesAStepWhileAWeightPackScopeIsOpen) {
  // Weights packed inside the scope would go stale if the update wrote them there.
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, -4.0f};
  const std::vector<float> p0 = p;
  AdamW opt({{"w", p, g}});
  WeightPackCache cache;
  {
    const WeightPackScope scope(cache);
    EXPECT_THROW(opt.step(0.01), Error);
  }
  EXPECT_EQ(p, p0);
  EXPECT_EQ(opt.step_count(), 0);
  opt.step(0.01);  // after the scope
  EXPECT_EQ(opt.step_count(), 1);
}

TEST(AdamW, TenStepsMatchDoubleReference) {
  const std::vector<std::string> names = {"h.0.attn.weight", "h.0.ln_1.weight", "wte.weight"};
  Params ps({70000, 33, 517}, 1);  // 70000: more than one parallel chunk
  const AdamWOptions o{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  AdamW opt(ps.named(names), o);
  ASSERT_TRUE(opt.decays(0));
  ASSERT_FALSE(opt.decays(1));
  std::vector<std::vector<double>> p, m, v;
  for (auto& x : ps.value) {
    p.emplace_back(x.begin(), x.end());
    m.emplace_back(x.size(), 0.0);
    v.emplace_back(x.size(), 0.0);
  }
  std::mt19937 rng(2);
  for (int t = 1; t <= 10; ++t) {
    ps.new_grads(rng);
    const double lr = 1e-3 * t;  // changes every step, as under a schedule
    opt.step(lr);
    for (size_t k = 0; k < p.size(); ++k) {
      const double wd = k == 1 ? 0.0 : o.weight_decay;
      for (size_t i = 0; i < p[k].size(); ++i) {
        const double g = ps.grad[k][i];
        p[k][i] *= 1 - lr * wd;
        m[k][i] = o.beta1 * m[k][i] + (1 - o.beta1) * g;
        v[k][i] = o.beta2 * v[k][i] + (1 - o.beta2) * g * g;
        const double mh = m[k][i] / (1 - std::pow(o.beta1, t));
        const double vh = v[k][i] / (1 - std::pow(o.beta2, t));
        p[k][i] -= lr * mh / (std::sqrt(vh) + o.eps);
      }
    }
  }
  // Each step moves p by at most ~lr·few; float rounding of p and of the update accumulates over
  // 10 steps: bar 10 · 8 ulp of |p| plus 1e-6 relative to the total movement.
  for (size_t k = 0; k < p.size(); ++k)
    for (size_t i = 0; i < p[k].size(); ++i) {
      const double bar = 10 * 8 * 0x1p-24 * (std::abs(p[k][i]) + 0.06);
      ASSERT_NEAR(ps.value[k][i], p[k][i], bar) << names[k] << "[" << i << "]";
    }
}

TEST(AdamW, ExcludedParameterIsNotDecayed) {
  // Zero gradients: the moment update is zero, so only decay can move a parameter.
  std::vector<float> w = {2.0f, -3.0f}, b = {2.0f, -3.0f}, zero = {0.0f, 0.0f};
  AdamW opt({{"fc.weight", w, zero}, {"fc.bias", b, zero}}, {.weight_decay = 0.5});
  opt.step(0.1);
  EXPECT_EQ(w[0], 2.0f * float(1 - 0.05));
  EXPECT_EQ(b, (std::vector<float>{2.0f, -3.0f}));
  // An empty predicate excludes nothing (torch's default).
  AdamW all({{"fc.bias", b, zero}}, {.weight_decay = 0.5}, NoDecayPredicate{});
  all.step(0.1);
  EXPECT_EQ(b[0], 2.0f * float(1 - 0.05));
}

TEST(AdamW, DefaultPredicateNames) {
  for (const char* n : {"fc.bias", "bias", "h.3.ln_1.weight", "ln_f.weight",
                        "model.layers.0.input_layernorm.weight", "encoder.LayerNorm.weight",
                        "model.norm.weight", "attn.c_attn.bias"})
    EXPECT_TRUE(is_bias_or_norm(n)) << n;
  for (const char* n : {"wte.weight", "h.0.attn.c_attn.weight", "lm_head.weight",
                        "model.layers.0.mlp.down_proj.weight", "biased.weight", "kiln_x.weight"})
    EXPECT_FALSE(is_bias_or_norm(n)) << n;
}

TEST(AdamW, SaveLoadResumesBitExactly) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("attnkit_adamw_" + std::to_string(::getpid()) + ".safetensors");
  const std::vector<std::string> names = {"a.weight", "a.bias"};
  Params run(std::vector<size_t>{40, 7}, 5), resumed(std::vector<size_t>{40, 7}, 5);
  std::mt19937 rng_run(9);
  AdamW opt(run.named(names), {.weight_decay = 0.1});
  for (int t = 0; t < 3; ++t) {
    run.new_grads(rng_run);
    opt.step(1e-2);
  }
  opt.save_state(path.string());
  resumed.value = run.value;  // the model weights would come from their own checkpoint
  AdamW opt2(resumed.named(names), {.weight_decay = 0.1});
  opt2.load_state(path.string());
  EXPECT_EQ(opt2.step_count(), 3);
  std::mt19937 rng2 = rng_run;
  for (int t = 0; t < 3; ++t) {
    run.new_grads(rng_run);
    resumed.new_grads(rng2);
    opt.step(1e-2);
    opt2.step(1e-2);
  }
  EXPECT_EQ(run.value, resumed.value);
  const auto st = opt.state();
  ASSERT_EQ(st.size(), 4u);
  EXPECT_EQ(st[0].name, "a.weight.exp_avg");
  EXPECT_EQ(st[3].name, "a.bias.exp_avg_sq");
  // A parameter set the file does not cover is rejected without changes.
  std::vector<float> other(5), og(5);
  AdamW wrong({{"z.weight", other, og}});
  EXPECT_THROW(wrong.load_state(path.string()), Error);
  EXPECT_EQ(wrong.step_count(), 0);
  std::filesystem::remove(path);
}

TEST(AdamW, ThreadCountInvariant) {
  Params a(std::vector<size_t>{100000, 3}, 4), b(std::vector<size_t>{100000, 3}, 4);
  std::mt19937 ra(1), rb(1);
  a.new_grads(ra);
  b.new_grads(rb);
  AdamW oa(a.named({"x", "y"})), ob(b.named({"x", "y"}));
  {
    ThreadCountScope one(1);
    oa.step(1e-3);
  }
  {
    ThreadCountScope many(4);
    ob.step(1e-3);
  }
  EXPECT_EQ(a.value, b.value);
}

TEST(AdamW, RejectsBadArguments) {
  std::vector<float> p(3), g(3), g2(2);
  EXPECT_THROW(AdamW({{"w", p, g2}}), Error);
  EXPECT_THROW(AdamW({{"w", p, g}, {"w", p, g}}), Error);
  EXPECT_THROW(AdamW({{"", p, g}}), Error);
  EXPECT_THROW(AdamW({{"w", p, g}}, {.beta1 = 1.0}), Error);
  EXPECT_THROW(AdamW({{"w", p, g}}, {.weight_decay = -1}), Error);
  AdamW ok({{"w", p, g}});
  EXPECT_THROW(ok.step(-1.0), Error);
  EXPECT_THROW(ok.set_step_count(-2), Error);
  // inf decay or epsilon made every parameter -inf or left it unchanged without a word; the step
  // count wrapped to INT64_MIN and the bias correction gave NaN parameters.
  EXPECT_THROW(AdamW({{"w", p, g}}, {.weight_decay = INFINITY}), Error);
  EXPECT_THROW(AdamW({{"w", p, g}}, {.eps = INFINITY}), Error);
  EXPECT_THROW(AdamW({{"w", p, g}}, {.eps = NAN}), Error);
  ok.set_step_count(std::numeric_limits<int64_t>::max());
  const std::vector<float> before = p;
  EXPECT_THROW(ok.step(1e-3), Error);
  EXPECT_EQ(p, before);
}

}  // namespace
}  // namespace attnkit
