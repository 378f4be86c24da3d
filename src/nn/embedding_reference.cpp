// Embedding reference, the executable spec of embedding.hpp: y[t, :] = table[ids[t], :];
// d_table[v, :] += Σ_{t : ids[t] = v} d_y[t, :], each row's sum formed in double.
#include <algorithm>
#include <numeric>
#include <vector>

#include "attnkit/nn/embedding.hpp"
#include "nn_common.hpp"

namespace attnkit {

void embedding_forward_reference(View2 y, std::span<const int32_t> ids, ConstView2 table) {
  nn::check_embedding("embedding_forward_reference", "y", y, ids, table, "table");
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t c = 0; c < table.shape[1]; ++c) y(int64_t(t), c) = table(ids[t], c);
}

void embedding_backward_reference(View2 d_table, std::span<const int32_t> ids, ConstView2 d_y) {
  nn::check_embedding("embedding_backward_reference", "d_y", d_y, ids, d_table, "d_table");
  const int64_t c = d_table.shape[1];
  std::vector<size_t> order(ids.size());  // tokens grouped by id, in token order within a group
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
  std::vector<double> acc(static_cast<size_t>(c));
  for (size_t g = 0; g < order.size();) {
    const int32_t v = ids[order[g]];
    std::fill(acc.begin(), acc.end(), 0.0);
    for (; g < order.size() && ids[order[g]] == v; ++g)
      for (int64_t j = 0; j < c; ++j) acc[size_t(j)] += double(d_y(int64_t(order[g]), j));
    for (int64_t j = 0; j < c; ++j) d_table(v, j) = float(double(d_table(v, j)) + acc[size_t(j)]);
  }
}

}  // namespace attnkit
