// Private nn helpers: first_non_finite (the trainers' parameter check) and parallel_fill.
#include "../../src/nn/nn_common.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attnkit/core/parallel.hpp"

namespace attnkit {
namespace {

TEST(NnCommon, FirstNonFiniteFindsTheFirstInfOrNaN) {
  EXPECT_EQ(nn::first_non_finite({}), -1);
  std::vector<float> v(100003);  // several parallel blocks and a short last one
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 7) - 3.0f;
  v[5] = std::numeric_limits<float>::max(), v[6] = -std::numeric_limits<float>::max();
  v[7] = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(nn::first_non_finite(v), -1);
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (const float b : bad)
    for (const size_t at : {size_t(0), size_t(16383), size_t(16384), size_t(70000), v.size() - 1}) {
      std::vector<float> w = v;
      w[at] = b;
      EXPECT_EQ(nn::first_non_finite(w), int64_t(at)) << b << " at " << at;
      w[v.size() - 1] = b;  // a later one does not hide the first
      EXPECT_EQ(nn::first_non_finite(w), int64_t(at));
    }
}

TEST(NnCommon, ParallelFillSetsEveryValue) {
  for (int threads : {1, 2}) {
    ThreadCountScope scope(threads);
    std::vector<float> v(50001, 3.0f);
    nn::parallel_fill(v, 0.0f);
    EXPECT_EQ(v, std::vector<float>(v.size(), 0.0f));
  }
}

}  // namespace
}  // namespace attnkit
