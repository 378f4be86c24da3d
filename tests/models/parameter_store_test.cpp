// ParameterStore (models/parameter_store.hpp): layout in insertion order, look-ups by name that
// name a missing tensor, views onto parameters and gradients, and a save/load round trip of
// parameters and buffers through a model directory.
#include "attnkit/models/parameter_store.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "attnkit/core/error.hpp"

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

}  // namespace
}  // namespace attnkit
