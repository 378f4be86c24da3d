// Attention block: fast path vs the reference block (GQA 2 and 4, every gate mode and source,
// every sink mode, windows, bidirectional, varlen with 2-3 sequences, strided padded weights with
// guard bands), finite differences of the reference block's loss Σ out·r w.r.t. x and every
// parameter, the gradient contract (+= on parameters, = on d_x), gate statistics and errors.
#include "attnkit/nn/attention_block.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "attnkit/core/error.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using nn_testing::GradCheck;
using nn_testing::Mat;

struct BlockCase {
  std::string name;
  AttentionBlockOptions opts;
  int64_t channels;
  std::vector<int32_t> lengths;  // one entry per sequence
};

// Inputs and parameters of one block, random with O(1) activations (weights ~ N(0, 1/in)).
struct Block {
  AttentionBlockOptions o;
  int64_t t = 0, c = 0;
  std::vector<int32_t> cu{0};
  std::vector<int64_t> pos;
  Mat x, w_qkv, w_o, w_g, r;
  std::vector<float> b_qkv, b_o, sinks, b_g;

  Block(const BlockCase& k, uint32_t seed) : o(k.opts), c(k.channels) {
    for (int32_t l : k.lengths) {
      for (int32_t i = 0; i < l; ++i) pos.push_back(i);
      cu.push_back(cu.back() + l);
    }
    t = cu.back();
    const int64_t hd = o.heads * o.head_dim, hg = o.gate_width();
    const float sc = 1 / std::sqrt(float(c)), so = 1 / std::sqrt(float(hd));
    x = Mat(t, c).randn(seed);
    r = Mat(t, c).randn(seed + 1);
    w_qkv = Mat(o.qkv_width(), c).randn(seed + 2, sc);
    w_o = Mat(c, hd).randn(seed + 3, so);
    if (o.qkv_bias) b_qkv = randn(o.qkv_width(), seed + 4, 0.5f);
    if (o.o_bias) b_o = randn(c, seed + 5, 0.5f);
    if (o.sink_logits == SinkLogits::kLearned) sinks = randn(o.heads, seed + 6);
    if (hg > 0) {
      const bool query = o.gate_source == GateSource::kQuery;
      const int64_t in = query ? o.head_dim : c;
      w_g = Mat(hg, in).randn(seed + 7, 1 / std::sqrt(float(in)));
      if (o.gate_bias) b_g = randn(hg, seed + 8, 0.5f);
    }
  }
  AttentionBlockParams params() const {
    return {w_qkv.cview(), b_qkv, w_o.cview(), b_o, sinks,
            w_g.rows ? w_g.cview() : ConstView2{}, b_g};
  }
  AttentionBlockBatch batch() const { return {cu, pos}; }
};

// Gradients shaped like a block's parameters, filled with `fill`.
struct Grads {
  Mat d_x, w_qkv, w_o, w_g;
  std::vector<float> b_qkv, b_o, sinks, b_g;
  Grads(const Block& b, float fill) {
    auto mat = [&](const Mat& like) {
      Mat m(like.rows, like.cols);
      for (int64_t i = 0; i < m.rows; ++i)
        for (int64_t j = 0; j < m.cols; ++j) m.at(i, j) = fill;
      return m;
    };
    d_x = mat(b.x), w_qkv = mat(b.w_qkv), w_o = mat(b.w_o), w_g = mat(b.w_g);
    b_qkv.assign(b.b_qkv.size(), fill), b_o.assign(b.b_o.size(), fill);
    sinks.assign(b.sinks.size(), fill), b_g.assign(b.b_g.size(), fill);
  }
  AttentionBlockGrads view() {
    return {w_qkv.view(), b_qkv, w_o.view(), b_o, sinks, w_g.rows ? w_g.view() : View2{}, b_g};
  }
  std::vector<std::pair<std::string, const Mat*>> mats() const {
    return {{"d_x", &d_x}, {"d_qkv_proj_weight", &w_qkv}, {"d_o_proj_weight", &w_o},
            {"d_gate_proj_weight", &w_g}};
  }
  std::vector<std::pair<std::string, const std::vector<float>*>> vecs() const {
    return {{"d_qkv_proj_bias", &b_qkv}, {"d_o_proj_bias", &b_o}, {"d_sinks", &sinks},
            {"d_gate_proj_bias", &b_g}};
  }
};

struct Result {
  Mat out, gate;
  Grads grads;
};

Result run(const Block& b, bool reference, float grad_fill = 0.0f) {
  AttentionBlockWorkspace ws(b.o, b.t);
  Result res{Mat(b.t, b.c), Mat(), Grads(b, grad_fill)};
  const AttentionBlockCache cache = ws.cache();
  (reference ? attention_block_forward_reference : attention_block_forward)(
      res.out.view(), cache, b.x.cview(), b.batch(), b.params(), b.o);
  (reference ? attention_block_backward_reference : attention_block_backward)(
      res.grads.d_x.view(), res.grads.view(), ws.scratch(), b.r.cview(), b.x.cview(), cache,
      b.batch(), b.params(), b.o);
  if (cache.gate.data != nullptr) {
    res.gate = Mat(cache.gate.shape[0], cache.gate.shape[1]);
    for (int64_t i = 0; i < res.gate.rows; ++i)
      for (int64_t j = 0; j < res.gate.cols; ++j) {
        res.gate.at(i, j) = cache.gate(i, j);
        EXPECT_NEAR(cache.gate(i, j), 1 / (1 + std::exp(-double(cache.gate_pre(i, j)))), 1e-6);
      }
  }
  return res;
}

double max_abs(const Mat& m) {
  double s = 0;
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) s = std::max(s, double(std::abs(m.at(i, j))));
  return s;
}

std::vector<BlockCase> cases() {
  auto opts = [](int64_t h, int64_t hkv) {
    return AttentionBlockOptions{.heads = h, .kv_heads = hkv, .head_dim = 8};
  };
  std::vector<BlockCase> v;
  v.push_back({"MhaCausal", opts(2, 2), 16, {9}});
  {
    auto o = opts(4, 2);
    o.gate = GateMode::kHeadwise, o.sink_logits = SinkLogits::kLearned, o.qkv_bias = o.o_bias = true;
    v.push_back({"Gqa2HeadwiseInputLearnedSink", o, 24, {7, 17}});
  }
  {
    auto o = opts(4, 1);
    o.gate = GateMode::kElementwise, o.sink_logits = SinkLogits::kOffByOne, o.window_left = 5;
    v.push_back({"Gqa4ElementwiseInputOffByOneWindow", o, 24, {7, 17, 3}});
  }
  {
    auto o = opts(4, 2);
    o.gate = GateMode::kHeadwise, o.gate_source = GateSource::kQuery, o.sink_logits = SinkLogits::kLearned;
    v.push_back({"Gqa2HeadwiseQueryRope", o, 20, {6, 11}});
  }
  {
    auto o = opts(4, 1);
    o.gate = GateMode::kElementwise, o.gate_source = GateSource::kQuery, o.gate_bias = false;
    o.rope_theta = 500000.0, o.o_bias = true;
    v.push_back({"Gqa4ElementwiseQueryRopeNoGateBias", o, 20, {13, 4, 9}});
  }
  {
    auto o = opts(2, 1);
    o.gate = GateMode::kElementwise, o.gate_source = GateSource::kQuery, o.rope_theta = 0;
    o.causal = false, o.window_left = 3, o.window_right = 2;
    v.push_back({"ElementwiseQueryNoRopeBidirectionalWindow", o, 12, {5, 9}});
  }
  {
    auto o = opts(4, 4);
    o.causal = false, o.sink_logits = SinkLogits::kOffByOne, o.qkv_bias = true;
    v.push_back({"BidirectionalOffByOne", o, 16, {8, 3}});
  }
  return v;
}

class AttentionBlockVsReference : public ::testing::TestWithParam<BlockCase> {};

// Bar: every stage is a float32 sum of at most n terms (n = max(C, H·D, L·D)), error
// ~sqrt(n)·2^-24 of its scale each, compounded over ~5 stages; 64·sqrt(n)·2^-24 of the result's
// scale (flash attention's own bar, tests/attention/flash_attention_test.cpp) leaves margin,
// while a wrong term is off by O(0.1) of the scale.
TEST_P(AttentionBlockVsReference, ForwardAndGradientsMatch) {
  const BlockCase& k = GetParam();
  const Block b(k, 7);
  const Result fast = run(b, false), ref = run(b, true);
  int64_t longest = *std::max_element(k.lengths.begin(), k.lengths.end());
  const int64_t n = std::max({b.c, k.opts.heads * k.opts.head_dim, longest * k.opts.head_dim});
  const double tol = 64 * std::sqrt(double(n)) * nn_testing::kU;
  auto expect_close = [&](const Mat& got, const Mat& want, const std::string& what) {
    const double bar = tol * std::max(1.0, max_abs(want));
    nn_testing::expect_within(got, want, [&](int64_t, int64_t) { return bar; }, k.name + " " + what);
  };
  expect_close(fast.out, ref.out, "out");
  if (k.opts.gate != GateMode::kNone) expect_close(fast.gate, ref.gate, "gate");
  for (size_t i = 0; i < fast.grads.mats().size(); ++i)
    expect_close(*fast.grads.mats()[i].second, *ref.grads.mats()[i].second,
                 fast.grads.mats()[i].first);
  for (size_t i = 0; i < fast.grads.vecs().size(); ++i) {
    const auto& got = *fast.grads.vecs()[i].second;
    const auto& want = *ref.grads.vecs()[i].second;
    double scale = 1;
    for (float w : want) scale = std::max(scale, double(std::abs(w)));
    nn_testing::expect_within(got, want, [&](size_t) { return tol * scale; },
                              k.name + " " + fast.grads.vecs()[i].first);
  }
}

INSTANTIATE_TEST_SUITE_P(AttentionBlock, AttentionBlockVsReference, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// Finite differences of L = Σ r ⊙ out(reference block) w.r.t. x and every parameter entry, on a
// tiny block (T = 5 in two sequences, C = 6, H = 2, Hkv = 1, D = 4). Bar: kFiniteDifferenceBar
// (nn_testing.hpp): the block is smooth and weights ~N(0, 1/in) keep activations O(1).
class AttentionBlockFiniteDifferences : public ::testing::TestWithParam<BlockCase> {};

TEST_P(AttentionBlockFiniteDifferences, ReferenceGradientsMatch) {
  const BlockCase& k = GetParam();
  Block b(k, 3);
  const Result ref = run(b, true);
  AttentionBlockWorkspace ws(b.o, b.t);
  Mat out(b.t, b.c);
  auto loss = [&] {
    attention_block_forward_reference(out.view(), ws.cache(), b.x.cview(), b.batch(), b.params(),
                                      b.o);
    return nn_testing::weighted_sum(out, b.r);
  };
  const Grads& g = ref.grads;
  auto sweep = [&](auto& param, const auto& grad, const char* what) {
    GradCheck check;
    check.sweep(loss, param, grad);
    check.expect_ok(k.name + " " + what);
  };
  sweep(b.x, g.d_x, "d_x");
  sweep(b.w_qkv, g.w_qkv, "d_qkv_proj_weight");
  sweep(b.w_o, g.w_o, "d_o_proj_weight");
  sweep(b.w_g, g.w_g, "d_gate_proj_weight");
  sweep(b.b_qkv, g.b_qkv, "d_qkv_proj_bias");
  sweep(b.b_o, g.b_o, "d_o_proj_bias");
  sweep(b.sinks, g.sinks, "d_sinks");
  sweep(b.b_g, g.b_g, "d_gate_proj_bias");
}

std::vector<BlockCase> tiny_cases() {
  const AttentionBlockOptions base{.heads = 2, .kv_heads = 1, .head_dim = 4, .qkv_bias = true,
                                   .o_bias = true};
  std::vector<BlockCase> v;
  auto add = [&](const std::string& name, GateMode gate, GateSource src, SinkLogits sink,
                 bool causal) {
    auto o = base;
    o.gate = gate, o.gate_source = src, o.sink_logits = sink, o.causal = causal;
    v.push_back({name, o, 6, {3, 2}});
  };
  add("HeadwiseInputLearned", GateMode::kHeadwise, GateSource::kInput, SinkLogits::kLearned, true);
  add("ElementwiseInputOffByOne", GateMode::kElementwise, GateSource::kInput, SinkLogits::kOffByOne,
      true);
  add("HeadwiseQueryLearned", GateMode::kHeadwise, GateSource::kQuery, SinkLogits::kLearned, false);
  add("ElementwiseQueryNone", GateMode::kElementwise, GateSource::kQuery, SinkLogits::kNone, true);
  return v;
}

INSTANTIATE_TEST_SUITE_P(AttentionBlockTiny, AttentionBlockFiniteDifferences, ::testing::ValuesIn(tiny_cases()),
                         [](const auto& info) { return info.param.name; });

// Gradient contract: parameter gradients accumulate onto what the buffers held; d_x is assigned.
TEST(AttentionBlockContract, ParametersAccumulateInputGradientAssigned) {
  for (bool reference : {false, true})
    for (const BlockCase& k : {cases()[1], cases()[3]}) {
      const Block b(k, 5);
      const Result zero = run(b, reference, 0.0f), filled = run(b, reference, 0.75f);
      for (size_t i = 0; i < zero.grads.mats().size(); ++i) {
        const Mat &g0 = *zero.grads.mats()[i].second, &g1 = *filled.grads.mats()[i].second;
        const bool is_input = i == 0;
        for (int64_t r = 0; r < g0.rows; ++r)
          for (int64_t c = 0; c < g0.cols; ++c) {
            const double want = g0.at(r, c) + (is_input ? 0.0 : 0.75);
            ASSERT_NEAR(g1.at(r, c), want, 4 * nn_testing::kU * (std::abs(want) + 0.75))
                << k.name << " " << zero.grads.mats()[i].first << " reference=" << reference;
          }
      }
      for (size_t i = 0; i < zero.grads.vecs().size(); ++i) {
        const auto &g0 = *zero.grads.vecs()[i].second, &g1 = *filled.grads.vecs()[i].second;
        for (size_t j = 0; j < g0.size(); ++j)
          ASSERT_NEAR(g1[j], g0[j] + 0.75, 4 * nn_testing::kU * (std::abs(g0[j]) + 1.5))
              << k.name << " " << zero.grads.vecs()[i].first;
      }
    }
}

// Frozen parameters: empty gradient views are skipped, d_x is unchanged.
TEST(AttentionBlockContract, EmptyGradientsAreSkipped) {
  const Block b(cases()[2], 9);
  const Result full = run(b, false);
  AttentionBlockWorkspace ws(b.o, b.t);
  Mat out(b.t, b.c), d_x(b.t, b.c);
  attention_block_forward(out.view(), ws.cache(), b.x.cview(), b.batch(), b.params(), b.o);
  attention_block_backward(d_x.view(), {}, ws.scratch(), b.r.cview(), b.x.cview(), ws.cache(),
                           b.batch(), b.params(), b.o);
  EXPECT_TRUE(nn_testing::bitwise_equal(d_x, full.grads.d_x));
}

TEST(AttentionBlockErrors, NamesTheArgument) {
  const BlockCase k = cases()[1];
  auto expect_error = [&](const std::function<void(Block&, AttentionBlockOptions&)>& spoil,
                          const std::string& needle) {
    Block b(k, 1);
    AttentionBlockOptions o = b.o;
    spoil(b, o);
    AttentionBlockWorkspace ws(b.o, b.t);
    Mat out(b.t, b.c);
    const auto run = [&] {
      attention_block_forward(out.view(), ws.cache(), b.x.cview(), b.batch(), b.params(), o);
    };
    attnkit::expect_error(run, needle);
  };
  expect_error([](Block&, AttentionBlockOptions& o) { o.kv_heads = 3; }, "opts.kv_heads");
  expect_error([](Block& b, AttentionBlockOptions&) { b.sinks.clear(); }, "sinks");
  expect_error([](Block& b, AttentionBlockOptions&) { b.b_qkv.pop_back(); }, "qkv_proj_bias");
  expect_error([](Block& b, AttentionBlockOptions&) { b.w_o = Mat(b.c, 3); }, "o_proj_weight");
  expect_error([](Block& b, AttentionBlockOptions&) { b.pos.pop_back(); }, "positions");
  expect_error([](Block&, AttentionBlockOptions& o) { o.window_right = 2; }, "opts.window_right");
  expect_error([](Block& b, AttentionBlockOptions&) { b.cu[1] = 99; }, "cu_seqlens");
}

}  // namespace
}  // namespace attnkit
