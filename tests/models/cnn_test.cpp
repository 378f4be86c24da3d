// CNN model (models/cnn.hpp): every parameter's gradient against central finite differences on
// a tiny network, for each channel-attention kind, in training mode (batch statistics); eval
// mode uses and training updates the running statistics; save/load round trip; bad input.
#include "attnkit/models/cnn.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "models/image_round_trip.hpp"
#include "nn/nn_testing.hpp"

namespace attnkit {
namespace {

CnnConfig tiny(ChannelAttention a) {
  CnnConfig c;
  c.image_size = 8, c.num_labels = 3, c.widths = {3, 4, 6}, c.attention = a, c.reduction = 2;
  c.spatial_kernel = 3;
  return c;
}

class CnnGradient : public ::testing::TestWithParam<ChannelAttention> {};

// Central differences with steps h and h/2. ReLU and max-pool kinks make a difference meaningless
// when the step crosses one; such entries are recognised by differences at h and h/2 that disagree
// (on a smooth stretch they agree to O(h^2)) and another entry is drawn instead.
TEST_P(CnnGradient, EveryParameterMatchesFiniteDifferences) {
  const ThreadCountScope one_thread(1);  // tiny shapes: thread hand-offs would dominate
  const CnnConfig cfg = tiny(GetParam());
  CnnModel m(cfg);
  m.init_random(3);
  const int64_t n = 3;
  const std::vector<float> x = randn(n * 8 * 8, 5);
  const ConstView4 xv = ConstView4::contiguous(x.data(), {n, 1, 8, 8});
  const std::vector<float> r = randn(n * 3, 9);
  auto loss = [&] {
    const ConstView2 y = m.forward(xv);
    double s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < 3; ++k) s += double(y(i, k)) * r[size_t(i * 3 + k)];
    return s;
  };
  m.set_training(true);
  m.zero_grad();
  loss();
  m.backward(ConstView2::contiguous(r.data(), {n, 3}));
  const std::vector<float> grads(m.gradients().begin(), m.gradients().end());
  std::mt19937 pick(5);
  for (const auto& p : m.parameter_info()) {
    nn_testing::GradCheck check;
    int checked = 0, kinks = 0;
    while (checked < 4 && kinks < 8) {
      const int64_t i = p.offset + int64_t(pick() % uint32_t(p.numel));
      float* x = &m.parameters()[size_t(i)];
      const double a = nn_testing::numeric_grad(loss, x, 1e-3f), b = nn_testing::numeric_grad(loss, x, 5e-4f);
      if (std::abs(a - b) > 2 * nn_testing::kFiniteDifferenceBar * std::max(1.0, std::abs(a))) {
        ++kinks;
        continue;
      }
      check.add(a, grads[size_t(i)]);
      ++checked;
    }
    EXPECT_EQ(checked, 4) << p.name << ": " << kinks << " entries sat on kinks";
    check.expect_ok(p.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Attention, CnnGradient,
                         ::testing::Values(ChannelAttention::kNone, ChannelAttention::kSe,
                                           ChannelAttention::kCbam),
                         [](const auto& info) { return std::string(channel_attention_name(info.param)); });

TEST(Cnn, TrainingUpdatesRunningStatisticsAndEvalUsesThem) {
  const ThreadCountScope one_thread(1);
  CnnModel m(tiny(ChannelAttention::kCbam));
  m.init_random(1);
  const std::vector<float> x = randn(4 * 8 * 8, 2);
  const ConstView4 xv = ConstView4::contiguous(x.data(), {4, 1, 8, 8});
  const std::vector<float> before(m.buffers().begin(), m.buffers().end());
  const ConstView2 e1 = m.forward(xv);
  const std::vector<float> eval1(e1.data, e1.data + 12);
  EXPECT_EQ(std::vector<float>(m.buffers().begin(), m.buffers().end()), before);  // eval: unchanged
  m.set_training(true);
  m.forward(xv);
  EXPECT_NE(std::vector<float>(m.buffers().begin(), m.buffers().end()), before);
  m.set_training(false);
  const ConstView2 e2 = m.forward(xv);
  EXPECT_NE(std::vector<float>(e2.data, e2.data + 12), eval1);  // new running statistics
  // Eval results do not depend on the other images of the batch.
  const std::vector<float> first(x.begin(), x.begin() + 64);
  const ConstView2 one = m.forward(ConstView4::contiguous(first.data(), {1, 1, 8, 8}));
  const std::vector<float> single(one.data, one.data + 3);
  const ConstView2 all = m.forward(xv);
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(single[size_t(k)], all(0, k), 1e-5f);
}

TEST(Cnn, SaveLoadRoundTripIsBitwise) {
  const ThreadCountScope one_thread(1);
  CnnConfig cfg = tiny(ChannelAttention::kSe);
  cfg.labels = {"a", "b", "c"};
  CnnModel m(cfg);
  m.init_random(4);
  const std::vector<float> x = randn(2 * 8 * 8, 3);
  const ConstView4 xv = ConstView4::contiguous(x.data(), {2, 1, 8, 8});
  const std::unique_ptr<ImageClassifier> back = expect_bitwise_round_trip(m, xv, "cnn");
  ASSERT_TRUE(back);
  EXPECT_EQ(static_cast<CnnModel&>(*back).config().labels, cfg.labels);
}

TEST(Cnn, BadConfigsAndInputsThrow) {
  auto bad = [](const std::string& json) { EXPECT_THROW(parse_cnn_config(json), Error) << json; };
  bad("{");
  bad(R"({"model_type": "vit"})");
  bad(R"({"model_type": "cnn", "attention": "transformer"})");
  bad(R"({"model_type": "cnn", "widths": []})");
  bad(R"({"model_type": "cnn", "widths": [8, -1]})");
  bad(R"({"model_type": "cnn", "image_size": 2, "widths": [4, 4, 4, 4]})");
  bad(R"({"model_type": "cnn", "spatial_kernel": 4})");
  bad(R"({"model_type": "cnn", "num_labels": "ten"})");
  EXPECT_THROW(make_image_classifier(R"({"model_type": "rnn"})"), Error);
  EXPECT_THROW(make_image_classifier(R"({"widths": [4]})"), Error);
  const CnnConfig back = parse_cnn_config(cnn_config_to_json(tiny(ChannelAttention::kCbam)));
  EXPECT_EQ(back.widths, (std::vector<int64_t>{3, 4, 6}));
  EXPECT_EQ(back.attention, ChannelAttention::kCbam);

  CnnModel m(tiny(ChannelAttention::kNone));
  std::vector<float> x(2 * 9 * 9);
  EXPECT_THROW(m.forward(ConstView4::contiguous(x.data(), {2, 1, 9, 9})), Error);
  EXPECT_THROW(m.backward(ConstView2{}), Error);  // no forward yet
}

}  // namespace
}  // namespace attnkit
