// Embedding: exact forward, backward accumulation of repeated ids (vs the double reference and by
// finite differences), thread-count determinism, and the out-of-range error naming the index.
#include "attnkit/nn/embedding.hpp"

#include <gtest/gtest.h>

#include "attnkit/core/error.hpp"
#include "attnkit/core/parallel.hpp"
#include "nn/nn_testing.hpp"
#include "test_errors.hpp"

namespace attnkit {
namespace {

using nn_testing::kU;
using nn_testing::Mat;

std::vector<int32_t> random_ids(int64_t t, int64_t v, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, int32_t(v - 1));
  std::vector<int32_t> ids(static_cast<size_t>(t));
  for (auto& id : ids) id = pick(rng);
  return ids;
}

TEST(NnEmbedding, FastMatchesReferenceOnTailShapes) {
  for (int64_t t : {1, 7, 65})
    for (int64_t c : {1, 17, 64}) {
      SCOPED_TRACE(::testing::Message() << "T=" << t << " C=" << c);
      const int64_t v = 5;  // fewer rows than tokens: ids repeat
      const auto ids = random_ids(t, v, uint32_t(t + c));
      const Mat table = Mat(v, c).randn(1), d_y = Mat(t, c).randn(2);
      Mat y(t, c), y_ref(t, c);
      embedding_forward(y.view(), ids, table.cview());
      embedding_forward_reference(y_ref.view(), ids, table.cview());
      nn_testing::expect_within(
          y, y_ref, [](int64_t, int64_t) { return 0.0; }, "y (a copy)");
      Mat d_table = Mat(v, c).randn(3), d_table_ref = d_table;
      embedding_backward(d_table.view(), ids, d_y.cview());
      embedding_backward_reference(d_table_ref.view(), ids, d_y.cview());
      Mat mag = Mat(v, c).randn(3).abs();
      const Mat ady = d_y.abs();
      embedding_backward_reference(mag.view(), ids, ady.cview());
      // Float adds in token order: at most T + 1 roundings per term (prior value included).
      nn_testing::expect_within(
          d_table, d_table_ref,
          [&](int64_t i, int64_t j) { return double(t + 2) * kU * mag.at(i, j); }, "d_table");
    }
}

TEST(NnEmbedding, ReferenceGradientMatchesFiniteDifferences) {
  const std::vector<int32_t> ids = {2, 0, 2, 3, 2};  // id 2 three times, id 1 never
  Mat table = Mat(4, 3).randn(4);
  const Mat r = Mat(5, 3).randn(5);
  auto loss = [&] {
    Mat y(5, 3);
    embedding_forward_reference(y.view(), ids, table.cview());
    return nn_testing::weighted_sum(y, r);
  };
  Mat d_table(4, 3);
  embedding_backward_reference(d_table.view(), ids, r.cview());
  nn_testing::GradCheck g;
  g.sweep(loss, table, d_table);
  g.expect_ok("embedding");
  for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(d_table.at(1, j), 0.0f);  // unused row untouched
}

TEST(NnEmbedding, BackwardIsBitwiseIdenticalForAnyThreadCount) {
  const int64_t t = 500, v = 7, c = 200;  // heavy id repetition, several channel blocks
  const auto ids = random_ids(t, v, 8);
  const Mat d_y = Mat(t, c).randn(9);
  auto run = [&](int threads) {
    ThreadCountScope scope(threads);
    Mat d_table = Mat(v, c).randn(10);
    embedding_backward(d_table.view(), ids, d_y.cview());
    return d_table;
  };
  EXPECT_TRUE(nn_testing::bitwise_equal(run(1), run(3)));
}

// The backward's column blocks follow the table's cache-line alignment: every column must still
// be covered once, with the same sums, whatever the table's offset.
TEST(NnEmbedding, BackwardIsTheSameForAnyTableAlignment) {
  const int64_t t = 300, v = 6, c = 200, stride = 208;  // rows a whole number of cache lines
  const auto ids = random_ids(t, v, 11);
  const Mat d_y = Mat(t, c).randn(12), start = Mat(v, c).randn(13);
  Mat expected = start;
  embedding_backward(expected.view(), ids, d_y.cview());
  for (int64_t offset : {0, 1, 5, 15}) {
    std::vector<float> buf(size_t(v * stride + 16), -7.0f);
    const View2 table{buf.data() + offset, {v, c}, {stride, 1}};
    for (int64_t i = 0; i < v; ++i)
      for (int64_t j = 0; j < c; ++j) table(i, j) = start.at(i, j);
    {
      ThreadCountScope two(2);
      embedding_backward(table, ids, d_y.cview());
    }
    for (int64_t i = 0; i < v; ++i)
      for (int64_t j = 0; j < c; ++j)
        ASSERT_EQ(table(i, j), expected.at(i, j)) << "offset " << offset << " [" << i << ", " << j << "]";
    for (int64_t i = 0; i < offset; ++i) EXPECT_EQ(buf[size_t(i)], -7.0f);  // nothing before the table
  }
}

TEST(NnEmbedding, OutOfRangeIdNamesTheIndexAndWritesNothing) {
  const Mat table = Mat(10, 4).randn(1);
  Mat y(3, 4);
  for (int32_t bad : {10, -1}) {
    const std::vector<int32_t> ids = {1, 2, bad};
    expect_error([&] { embedding_forward(y.view(), ids, table.cview()); },
                 "ids[2] = " + std::to_string(bad) + " is out of range [0, 10)");
    Mat d_table(10, 4);
    EXPECT_THROW(embedding_backward(d_table.view(), ids, y.cview()), Error);
    for (int64_t i = 0; i < 10; ++i)
      for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(d_table.at(i, j), 0.0f);
  }
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(y.at(i, 0), 0.0f);  // validated before writing
  Mat wrong(3, 5);
  EXPECT_THROW(embedding_forward(wrong.view(), std::vector<int32_t>{0, 1, 2}, table.cview()),
               Error);
}

}  // namespace
}  // namespace attnkit
