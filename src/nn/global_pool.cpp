// Global average / max pooling (see global_pool.hpp). Backward of y = mean(plane):
// d_x = d_y / (H·W) everywhere; of y = max(plane): d_x = d_y at the argmax, 0 elsewhere.
#include "attnkit/nn/global_pool.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "hwy/highway.h"
#include "nn_common.hpp"
#include "ops/vector_loop.hpp"
#include "vision_common.hpp"

namespace attnkit {
namespace {

void check_global(const char* fn, ConstView4 x, const char* x_name, ConstView2 y,
                  const char* y_name) {
  const int64_t n = x.shape[0], c = x.shape[1];
  nn::check_nchw(x, fn, x_name, "[N, C, H, W]", n, c, x.shape[2], x.shape[3]);
  nn::check_matrix(y, fn, y_name, "[N, C]", n, c);
}

}  // namespace

void global_avg_pool_forward(View2 y, ConstView4 x) {
  check_global("global_avg_pool_forward", x, "x", y, "y");
  const int64_t c = x.shape[1], hw = x.shape[2] * x.shape[3];
  nn::parallel_rows(x.shape[0] * c, hw, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      y(p / c, p % c) = hw ? float(nn::sum_double(x.data + p * hw, hw) / double(hw)) : 0.0f;
  });
}

void global_avg_pool_backward(View4 d_x, ConstView2 d_y) {
  check_global("global_avg_pool_backward", d_x, "d_x", d_y, "d_y");
  const int64_t c = d_x.shape[1], hw = d_x.shape[2] * d_x.shape[3];
  nn::parallel_rows(d_x.shape[0] * c, hw, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      std::fill(d_x.data + p * hw, d_x.data + (p + 1) * hw, d_y(p / c, p % c) / float(hw));
  });
}

namespace hn = hwy::HWY_NAMESPACE;

// Each vector lane keeps its own first maximum (nn::later_wins); the lanes' winners are then
// compared by the same rule in index order.
int64_t nn::plane_argmax(const float* in, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  auto bv = hn::Set(df, -INFINITY);
  auto bi = hn::Set(di, INT32_MAX);
  vec::for_each_vector(n, [&](int64_t j, const vec::MF* in_f) {
    const auto v = vec::load(in + j, in_f);
    const auto idx = hn::Iota(di, int32_t(j));
    // A lane's first element always enters (its index is below INT32_MAX); later ones by the rule.
    const auto empty = hn::RebindMask(df, hn::Eq(bi, hn::Set(di, INT32_MAX)));
    auto t = hn::Or(nn::later_wins(df, bv, v), empty);
    if (in_f) t = hn::And(*in_f, t);
    bv = hn::IfThenElse(t, v, bv);
    bi = hn::IfThenElse(hn::RebindMask(di, t), idx, bi);
  });
  // Across lanes, in index order by the same rule: the first NaN if any lane holds one, else the
  // first index holding the largest value (each lane holds its own first NaN or first maximum).
  const auto held = hn::RebindMask(df, hn::Ne(bi, hn::Set(di, INT32_MAX)));
  auto cand = hn::And(held, hn::IsNaN(bv));
  if (hn::AllFalse(df, cand)) {
    const auto top = hn::MaxOfLanes(df, hn::IfThenElse(held, bv, hn::Set(df, -INFINITY)));
    cand = hn::And(held, hn::Eq(bv, top));
  }
  const auto first = hn::MinOfLanes(di, hn::IfThenElse(hn::RebindMask(di, cand), bi, hn::Set(di, INT32_MAX)));
  return hn::GetLane(first);
}

void global_max_pool_forward(View2 y, std::span<int32_t> argmax, ConstView4 x) {
  const char* fn = "global_max_pool_forward";
  check_global(fn, x, "x", y, "y");
  const int64_t c = x.shape[1], hw = x.shape[2] * x.shape[3];
  nn::check_span(argmax, fn, "argmax", "[N·C]", x.shape[0] * c);
  check(hw >= 1 && hw <= INT32_MAX, fn, ": x: expected 1..2^31-1 pixels per plane, got ", hw);
  nn::parallel_each_row(x.shape[0] * c, hw, [&](int64_t p) {
    const int64_t best = nn::plane_argmax(x.data + p * hw, hw);
    y(p / c, p % c) = x.data[p * hw + best];
    argmax[size_t(p)] = int32_t(best);
  });
}

void global_max_pool_backward(View4 d_x, ConstView2 d_y, std::span<const int32_t> argmax) {
  const char* fn = "global_max_pool_backward";
  check_global(fn, d_x, "d_x", d_y, "d_y");
  const int64_t c = d_x.shape[1], hw = d_x.shape[2] * d_x.shape[3];
  nn::check_span(argmax, fn, "argmax", "[N·C]", d_x.shape[0] * c);
  nn::check_argmax(fn, argmax, hw);
  nn::parallel_each_row(d_x.shape[0] * c, hw, [&](int64_t p) {
    std::fill(d_x.data + p * hw, d_x.data + (p + 1) * hw, 0.0f);
    d_x.data[p * hw + argmax[size_t(p)]] = d_y(p / c, p % c);
  });
}

}  // namespace attnkit
