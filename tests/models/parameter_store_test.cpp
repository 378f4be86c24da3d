// ParameterStore (models/parameter_store.hpp): layout in insertion order, look-ups by name that
// name a missing tensor, views onto parameters and gradients, and a save/load round trip of
// parameters and buffers through a model directory, which refuses non-finite values.
#include "attnkit/models/parameter_store.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "attnkit/core/error.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

ParameterStore make() {
  ParameterStore s("TestModel");
  s.add("a.weight", {3, 2});
  s.add("conv.weight", {2, 1, 2, 2});
  s.add_buffer("bn.running_var", {4});
  s.allocate();
  return s;
}

TEST(ParameterStore, LayoutLookupsAndViews) {
  ParameterStore s = make();
  ASSERT_EQ(s.info().size(), 2u);
  EXPECT_EQ(s.info()[1].offset, 6);
  EXPECT_EQ(s.parameters().size(), 14u);
  EXPECT_EQ(s.gradients().size(), 14u);
  EXPECT_EQ(s.buffers().size(), 4u);
  EXPECT_TRUE(s.has("conv.weight"));
  EXPECT_FALSE(s.has("bn.running_var"));  // a buffer, not a parameter
  std::iota(s.parameters().begin(), s.parameters().end(), 0.0f);
  const ConstView2 m = s.matrix("conv.weight");  // [2, 1·2·2]
  EXPECT_EQ(m.shape[0], 2);
  EXPECT_EQ(m.shape[1], 4);
  EXPECT_EQ(m(1, 0), 10.0f);
  s.grad_matrix("a.weight")(2, 1) = 5.0f;
  EXPECT_EQ(s.gradient("a.weight")[5], 5.0f);
  s.zero_grad();
  EXPECT_EQ(s.gradients()[5], 0.0f);
  try {
    s.parameter("missing");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "TestModel: no parameter named 'missing'");
  }
  ParameterStore dup("TestModel");
  dup.add("x", {1});
  EXPECT_THROW(dup.add("x", {2}), Error);
}

TEST(ParameterStore, HandlesViewTheSameFloatsAsNamesWithoutALookUp) {
  ParameterStore s("TestModel");
  s.add_linear("q", 2, 3);  // q.weight [2, 3], q.bias [2]
  s.add("k.weight", {1, 3});  // k.weight and k2.weight are consecutive, as fused k/v
  s.add("k2.weight", {1, 3});
  s.add_batch_norm("bn", 2);
  s.allocate();
  std::iota(s.parameters().begin(), s.parameters().end(), 0.0f);
  const LayerIds q = s.layer("q");
  EXPECT_EQ(s.matrix(q.weight).data, s.matrix("q.weight").data);
  EXPECT_EQ(s.vec(q.bias).data(), s.parameter("q.bias").data());
  EXPECT_EQ(s.vec(q.bias).size(), 2u);
  // rows > 0 extends the view over the tensors that follow (fused q/k/v): k.weight then k2.weight
  const TensorId k = s.id("k.weight");
  const ConstView2 fused = s.matrix(k, 2);
  EXPECT_EQ(fused.shape[0], 2);
  EXPECT_EQ(fused.shape[1], 3);
  EXPECT_EQ(fused(1, 0), s.parameter("k2.weight")[0]);
  s.grad_matrix(k, 2)(1, 2) = 4.0f;
  EXPECT_EQ(s.gradient("k2.weight")[2], 4.0f);
  // absent tensors: an id that is false and empty views
  const LayerIds none = s.find_layer("missing");
  EXPECT_FALSE(none.weight);
  EXPECT_TRUE(s.vec(none.bias).empty());
  EXPECT_EQ(s.matrix(none.weight).data, nullptr);
  EXPECT_THROW(s.id("missing"), Error);
  // batch norm: affine parameters and running statistics; running_var resets to one
  const BatchNormIds bn = s.batch_norm("bn");
  EXPECT_EQ(s.vec(bn.affine.weight).data(), s.parameter("bn.weight").data());
  EXPECT_EQ(s.buffer(bn.running_var)[1], 1.0f);
  EXPECT_EQ(s.buffer(bn.running_mean)[1], 0.0f);
  s.buffer(bn.running_var)[1] = 3.0f;
  s.reset_buffers();
  EXPECT_EQ(s.buffer("bn.running_var")[1], 1.0f);
}

TEST(ParameterStore, SaveLoadRoundTripsParametersAndBuffers) {
  const std::string dir = (std::filesystem::temp_directory_path() / "attnkit_store_test").string();
  ParameterStore s = make();
  std::iota(s.parameters().begin(), s.parameters().end(), 1.0f);
  s.buffer("bn.running_var")[2] = 7.0f;
  s.save(dir, "{}\n");
  ParameterStore back = make();
  back.load(dir);
  EXPECT_TRUE(std::equal(s.parameters().begin(), s.parameters().end(), back.parameters().begin()));
  EXPECT_EQ(back.buffer("bn.running_var")[2], 7.0f);
  ParameterStore other("Other");
  other.add("a.weight", {2, 3});  // same name, wrong shape
  other.allocate();
  EXPECT_THROW(other.load(dir), Error);
  std::filesystem::remove_all(dir);
}

// A NaN or infinite weight loaded without a word and made every output NaN; it is refused by name.
TEST(ParameterStore, LoadRefusesNonFiniteValues) {
  const std::string dir = (std::filesystem::temp_directory_path() / "attnkit_store_nan_test").string();
  for (const float bad : {NAN, INFINITY}) {
    ParameterStore s = make();
    std::iota(s.parameters().begin(), s.parameters().end(), 1.0f);
    s.parameter("conv.weight")[3] = bad;
    s.save(dir, "{}\n");
    ParameterStore back = make();
    expect_error([&] { back.load(dir); }, "TestModel.load: tensor 'conv.weight' in ");
    expect_error([&] { back.load(dir); }, "holds a non-finite value");
    expect_error([&] { back.load(dir); }, "at element 3");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnkit
