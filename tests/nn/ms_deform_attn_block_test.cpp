// MSDeformAttn module: the reference backend against central finite differences for every input
// and parameter gradient; fast vs reference; bitwise determinism across thread counts; Deformable
// DETR's initialisation; argument errors.
//
// Finite differences need the interpolant's kinks (integer pixel coordinates) out of reach of the
// 1e-2 steps: with 4 heads the initial offsets (cos, sin of 2πh/4, max-normalised, times p + 1)
// are integers, the reference points sit on integer + 0.5 pixel coordinates, and the query's part
// of the offsets stays below ~0.1 pixel (offset weights of scale 0.01), so every sampling
// coordinate is within 0.2 of a half-integer and every perturbation moves it by < 0.05.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/ms_deform_attn_block.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using nn_testing::GradCheck;

struct DeformBlockCase {
  MsDeformAttnBlockOptions opts{.d_model = 8, .heads = 4, .levels = 2, .points = 2};
  int64_t b = 2, q = 3, s = 0;
  std::vector<int64_t> shapes{3, 4, 2, 2}, starts{0, 12};
  std::vector<float> query, input, ref, d_out;
  std::vector<uint8_t> mask;
  MsDeformAttnBlockWeights w{opts};

  explicit DeformBlockCase(uint32_t seed) {
    s = 12 + 4;
    query = randn(b * q * opts.d_model, seed);
    input = randn(b * s * opts.d_model, seed + 1);
    d_out = randn(b * q * opts.d_model, seed + 2);
    std::mt19937 rng(seed + 3);
    ref.resize(size_t(b * q * opts.levels * 2));
    for (size_t i = 0; i < ref.size(); ++i) {
      const int64_t l = int64_t(i / 2) % opts.levels;
      const int64_t n = shapes[size_t(2 * l + (i % 2 == 0 ? 1 : 0))];  // W for x, H for y
      ref[i] = float(std::uniform_int_distribution<int64_t>(0, n)(rng)) / float(n);
    }
    mask.assign(size_t(b * s), 0);
    mask[3] = mask[size_t(s + 7)] = mask[size_t(s + 15)] = 1;
    ms_deform_attn_block_init(w, opts, seed);
    auto fill = [&](std::vector<float>& dst, uint32_t sd, float sigma) {
      const auto r = randn(int64_t(dst.size()), sd, sigma);
      std::copy(r.begin(), r.end(), dst.begin());
    };
    fill(w.sampling_offsets_weight.storage(), seed + 4, 0.01f);
    fill(w.attention_weights_weight.storage(), seed + 5, 0.5f);
    fill(w.attention_weights_bias.storage(), seed + 6, 0.5f);
    fill(w.value_proj_bias.storage(), seed + 7, 0.1f);
    fill(w.output_proj_bias.storage(), seed + 8, 0.1f);
  }

  MsDeformAttnBlockInputs inputs() const {
    const int64_t c = opts.d_model;
    return {.query = View<const float, 3>::contiguous(query.data(), {b, q, c}),
            .reference_points =
                View<const float, 4>::contiguous(ref.data(), {b, q, opts.levels, 2}),
            .input_flatten = View<const float, 3>::contiguous(input.data(), {b, s, c}),
            .spatial_shapes = shapes,
            .level_start_index = starts,
            .padding_mask = mask};
  }

  std::vector<float> forward(const MsDeformAttnBlockOptions& o,
                             MsDeformAttnBlockCache* cache = nullptr) const {
    std::vector<float> out(size_t(b * q * opts.d_model), 9.0f);
    MsDeformAttnBlockCache local;
    ms_deform_attn_block_forward(View3::contiguous(out.data(), {b, q, opts.d_model}),
                                 cache ? *cache : local, inputs(), w.params(), o);
    return out;
  }

  struct Result {
    std::vector<float> dq, dx, dref;
    MsDeformAttnBlockWeights g;
  };
  Result backward(const MsDeformAttnBlockOptions& o) const {
    MsDeformAttnBlockCache cache;
    forward(o, &cache);
    Result r{std::vector<float>(query.size(), 9.0f), std::vector<float>(input.size(), 9.0f),
             std::vector<float>(ref.size(), 9.0f), MsDeformAttnBlockWeights(opts)};
    const int64_t c = opts.d_model;
    ms_deform_attn_block_backward(
        View3::contiguous(r.dq.data(), {b, q, c}), View3::contiguous(r.dx.data(), {b, s, c}),
        View<float, 4>::contiguous(r.dref.data(), {b, q, opts.levels, 2}), r.g.grads(),
        ConstView3::contiguous(d_out.data(), {b, q, c}), inputs(), cache, w.params(), o);
    return r;
  }
};

TEST(MsDeformAttnBlock, ReferenceMatchesFiniteDifferences) {
  ThreadCountScope serial(1);  // ~2000 tiny forwards: thread start-up would dominate
  DeformBlockCase st(21);
  MsDeformAttnBlockOptions o = st.opts;
  o.reference = true;
  DeformBlockCase::Result r = st.backward(o);
  auto loss = [&] {
    const auto out = st.forward(o);
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i) sum += double(out[i]) * double(st.d_out[i]);
    return sum;
  };
  auto sweep = [&](std::vector<float>& x, const std::vector<float>& g, const std::string& what) {
    GradCheck c;
    c.sweep(loss, x, g);
    EXPECT_GT(c.scale, 1e-3) << what << ": gradient identically zero";
    c.expect_ok(what);
  };
  sweep(st.query, r.dq, "d_query");
  sweep(st.input, r.dx, "d_input_flatten");
  sweep(st.ref, r.dref, "d_reference_points");
  auto& w = st.w;
  auto& g = r.g;
  sweep(w.value_proj_weight.storage(), g.value_proj_weight.storage(), "value_proj_weight");
  sweep(w.value_proj_bias.storage(), g.value_proj_bias.storage(), "value_proj_bias");
  sweep(w.sampling_offsets_weight.storage(), g.sampling_offsets_weight.storage(),
        "sampling_offsets_weight");
  sweep(w.sampling_offsets_bias.storage(), g.sampling_offsets_bias.storage(),
        "sampling_offsets_bias");
  sweep(w.attention_weights_weight.storage(), g.attention_weights_weight.storage(),
        "attention_weights_weight");
  sweep(w.attention_weights_bias.storage(), g.attention_weights_bias.storage(),
        "attention_weights_bias");
  sweep(w.output_proj_weight.storage(), g.output_proj_weight.storage(), "output_proj_weight");
  sweep(w.output_proj_bias.storage(), g.output_proj_bias.storage(), "output_proj_bias");
  // Padded positions get no gradient.
  for (int64_t cc = 0; cc < st.opts.d_model; ++cc) EXPECT_EQ(r.dx[size_t(3 * 8 + cc)], 0.0f);
}

// Fast vs reference: float32 paths through sums of at most C + 4·Lv·P terms (a few hundred
// roundings of 2^-24 at the tensor's scale), so 2^-14 of the scale leaves a wide margin while a
// wrong term is off by O(scale).
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  double scale = 0;
  for (float x : want) scale = std::max(scale, double(std::abs(x)));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::abs(double(got[i]) - double(want[i])), 0x1p-14 * scale) << what << "[" << i << "]";
}

TEST(MsDeformAttnBlock, FastMatchesReference) {
  const DeformBlockCase st(22);
  MsDeformAttnBlockOptions ref_opts = st.opts;
  ref_opts.reference = true;
  expect_close(st.forward(st.opts), st.forward(ref_opts), "out");
  auto fast = st.backward(st.opts);
  auto ref = st.backward(ref_opts);
  expect_close(fast.dq, ref.dq, "d_query");
  expect_close(fast.dx, ref.dx, "d_input_flatten");
  expect_close(fast.dref, ref.dref, "d_reference_points");
  expect_close(fast.g.sampling_offsets_weight.storage(), ref.g.sampling_offsets_weight.storage(),
               "sampling_offsets_weight");
  expect_close(fast.g.attention_weights_bias.storage(), ref.g.attention_weights_bias.storage(),
               "attention_weights_bias");
  expect_close(fast.g.value_proj_weight.storage(), ref.g.value_proj_weight.storage(),
               "value_proj_weight");
}

TEST(MsDeformAttnBlock, BitwiseIdenticalAcrossThreadCounts) {
  const DeformBlockCase st(23);
  std::vector<std::vector<float>> outs;
  std::vector<DeformBlockCase::Result> grads;
  for (int t : {1, 3}) {
    ThreadCountScope scope(t);
    outs.push_back(st.forward(st.opts));
    grads.push_back(st.backward(st.opts));
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(grads[0].dq, grads[1].dq);
  EXPECT_EQ(grads[0].dx, grads[1].dx);
  EXPECT_EQ(grads[0].dref, grads[1].dref);
  EXPECT_EQ(grads[0].g.sampling_offsets_weight.storage(),
            grads[1].g.sampling_offsets_weight.storage());
}

TEST(MsDeformAttnBlock, DeformableDetrInitialisation) {
  const MsDeformAttnBlockOptions o{.d_model = 16, .heads = 8, .levels = 3, .points = 4};
  MsDeformAttnBlockWeights w(o);
  ms_deform_attn_block_init(w, o, 5);
  for (float x : w.sampling_offsets_weight.storage()) EXPECT_EQ(x, 0.0f);
  for (float x : w.attention_weights_weight.storage()) EXPECT_EQ(x, 0.0f);
  for (float x : w.attention_weights_bias.storage()) EXPECT_EQ(x, 0.0f);
  const float* b = w.sampling_offsets_bias.data();
  for (int64_t h = 0; h < o.heads; ++h) {
    const double th = 2 * M_PI * double(h) / double(o.heads);
    const double m = std::max(std::abs(std::cos(th)), std::abs(std::sin(th)));
    for (int64_t l = 0; l < o.levels; ++l)
      for (int64_t p = 0; p < o.points; ++p) {
        const int64_t i = ((h * o.levels + l) * o.points + p) * 2;
        EXPECT_NEAR(b[i], std::cos(th) / m * double(p + 1), 1e-6);
        EXPECT_NEAR(b[i + 1], std::sin(th) / m * double(p + 1), 1e-6);
      }
  }
  EXPECT_EQ(b[2 * 1], 2.0f);  // head 0, level 0, point 1 points along +x, two pixels
  double bound = std::sqrt(6.0 / 32.0), mx = 0;
  for (float x : w.value_proj_weight.storage()) mx = std::max(mx, double(std::abs(x)));
  EXPECT_LE(mx, bound);
  EXPECT_GT(mx, 0.5 * bound);
}

TEST(MsDeformAttnBlock, UniformWeightsAtInit) {
  DeformBlockCase st(24);
  ms_deform_attn_block_init(st.w, st.opts, 1);
  MsDeformAttnBlockCache cache;
  st.forward(st.opts, &cache);
  for (float x : cache.weights.storage()) EXPECT_FLOAT_EQ(x, 1.0f / 4.0f);
}

TEST(MsDeformAttnBlock, RejectsBadArguments) {
  const DeformBlockCase st(25);
  auto expect_error = [&](const std::function<void(MsDeformAttnBlockInputs&,
                                                   MsDeformAttnBlockOptions&)>& spoil,
                          const std::string& needle) {
    MsDeformAttnBlockInputs in = st.inputs();
    MsDeformAttnBlockOptions o = st.opts;
    spoil(in, o);
    std::vector<float> out(size_t(st.b * st.q * st.opts.d_model));
    MsDeformAttnBlockCache cache;
    attnkit::expect_error(
        [&] {
          ms_deform_attn_block_forward(
              View3::contiguous(out.data(), {st.b, st.q, st.opts.d_model}), cache, in,
              st.w.params(), o);
        },
        needle);
  };
  expect_error([](auto&, auto& o) { o.heads = 3; }, "opts.d_model");
  expect_error([](auto&, auto& o) { o.points = 3; }, "sampling_offsets_weight");
  expect_error([](auto& in, auto&) { in.reference_points.shape[2] = 1; }, "reference_points");
  expect_error([](auto& in, auto&) { in.padding_mask = in.padding_mask.subspan(1); },
               "padding_mask");
  expect_error([](auto& in, auto&) { in.query.stride[1] = 16; }, "query");
  expect_error([](auto& in, auto&) { in.spatial_shapes = in.spatial_shapes.subspan(2); },
               "spatial_shapes");
}

}  // namespace
}  // namespace attnkit
