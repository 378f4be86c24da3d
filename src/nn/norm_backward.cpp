// LayerNorm and RMSNorm backward fast path: one pass over fixed blocks of rows that forms each
// row's two (one) channel sums, its input gradient and the block's share of the parameter
// gradients together, so x and d_y are read once (they were read twice, by a parameter pass and
// an input-gradient pass). Vectors of floats on Highway's static target; every sum is taken in
// double (row sums over the channels, parameter sums over the tokens), as the reference does.
// Backward of y = x̂·w + b with x̂ = (x - μ)·r: with g = d_y·w,
//   d_x = r·(g - mean(g) - x̂·mean(g·x̂))            (LayerNorm: μ and r depend on x)
//   d_x = r·(g - x·r²·mean(g·x))                      (RMSNorm: y = x·r·w, r = (mean(x²)+eps)^-½)
// Parameter gradients: each block sums its rows in order into its own double partials, then the
// partials are added in block order. Blocks depend only on (T, C): bitwise identical for any
// thread count. d_x may alias d_y and d_residual (each row is read before it is written).
#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/norm.hpp"
#include "hwy/highway.h"
#include "nn_common.hpp"
#include "ops/vector_loop.hpp"

namespace attnkit {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DH = hn::Half<DF>;
using DD = hn::Rebind<double, DH>;  // as many doubles as half a float vector
using VD = hn::Vec<DD>;
using MF = hn::Mask<DF>;

using vec::for_each_vector;
using vec::kLanes;
using vec::load;
using vec::store;

// Rows per block for C channels: about 16 Ki elements (a task's worth), at most 64 blocks, so
// the double partials stay small (64 × 2C) for any T.
int64_t rows_per_block(int64_t tokens, int64_t c) {
  constexpr int64_t kElems = 16384, kMaxBlocks = 64;
  const int64_t per = std::max<int64_t>(1, kElems / std::max<int64_t>(c, 1));
  return std::max(per, (tokens + kMaxBlocks - 1) / kMaxBlocks);
}

// acc[0:lanes) += double(a)·double(b) lane by lane, or += double(a) when b is null (products in
// double, as the reference forms them).
HWY_INLINE void add_products(double* HWY_RESTRICT acc, VF a, const VF* b) {
  const DH dh;
  const DD dd;
  const size_t half = hn::Lanes(dd);
  VD lo = hn::PromoteTo(dd, hn::LowerHalf(dh, a)), hi = hn::PromoteTo(dd, hn::UpperHalf(dh, a));
  if (b) {
    lo = hn::Mul(lo, hn::PromoteTo(dd, hn::LowerHalf(dh, *b)));
    hi = hn::Mul(hi, hn::PromoteTo(dd, hn::UpperHalf(dh, *b)));
  }
  hn::StoreU(hn::Add(hn::LoadU(dd, acc), lo), dd, acc);
  hn::StoreU(hn::Add(hn::LoadU(dd, acc + half), hi), dd, acc + half);
}

// The vector sum s (two halves) gains double(a)·double(b) lane by lane, or
// double(a)·double(b)·double(c) with c (every product in double, as the reference forms them).
HWY_INLINE void sum_products(VD& s_lo, VD& s_hi, VF a, VF b, const VF* c = nullptr) {
  const DH dh;
  const DD dd;
  VD lo = hn::Mul(hn::PromoteTo(dd, hn::LowerHalf(dh, a)), hn::PromoteTo(dd, hn::LowerHalf(dh, b)));
  VD hi = hn::Mul(hn::PromoteTo(dd, hn::UpperHalf(dh, a)), hn::PromoteTo(dd, hn::UpperHalf(dh, b)));
  if (c) {
    lo = hn::Mul(lo, hn::PromoteTo(dd, hn::LowerHalf(dh, *c)));
    hi = hn::Mul(hi, hn::PromoteTo(dd, hn::UpperHalf(dh, *c)));
  }
  s_lo = hn::Add(s_lo, lo);
  s_hi = hn::Add(s_hi, hi);
}

HWY_INLINE double total(VD lo, VD hi) {
  const DD dd;
  return hn::GetLane(hn::SumOfLanes(dd, hn::Add(lo, hi)));
}

// Per-call buffers: w padded with ones (w empty: all ones) to whole vectors, and the blocks'
// parameter partials, [block][arrays × padded C] doubles, blocks a cache line apart.
struct NormScratch {
  int64_t c, padded, block_stride;
  std::vector<float> w;
  std::vector<double> partial;
  NormScratch(std::span<const float> weight, int64_t channels, int64_t blocks, int arrays)
      : c(channels), padded((channels + kLanes - 1) / kLanes * kLanes),
        block_stride(arrays * padded + 8), w(size_t(padded), 1.0f) {
    std::copy(weight.begin(), weight.end(), w.begin());
    if (arrays > 0) partial.assign(size_t(blocks * block_stride), 0.0);
  }
  double* block(int64_t b) { return partial.data() + b * block_stride; }
  // dst[j] += float(Σ_blocks partial[block][array·padded + j]), blocks in order.
  void reduce(std::span<float> dst, int array, int64_t blocks) const {
    if (dst.empty()) return;
    for (int64_t j = 0; j < c; ++j) {
      double s = 0;
      for (int64_t b = 0; b < blocks; ++b) s += partial[size_t(b * block_stride + array * padded + j)];
      dst[size_t(j)] += float(s);
    }
  }
};

}  // namespace

void layer_norm_backward(View2 d_x, std::span<float> d_w, std::span<float> d_b, ConstView2 d_y,
                         ConstView2 x, std::span<const float> w, std::span<const float> mean,
                         std::span<const float> rstd, ConstView2 d_residual) {
  const char* fn = "layer_norm_backward";
  nn::check_norm_backward(fn, d_x, d_w, d_b, d_y, x, w, mean, rstd, d_residual, true);
  const int64_t tokens = x.shape[0], c = x.shape[1];
  if (tokens == 0) return;
  const int64_t per = rows_per_block(tokens, c), blocks = (tokens + per - 1) / per;
  const bool params = !d_w.empty() || !d_b.empty();
  NormScratch sc(w, c, blocks, params ? 2 : 0);
  const bool residual = nn::present(d_residual);
  parallel_for(blocks, [&](int64_t blk) {
    const DF df;
    const DD dd;
    double* acc = params ? sc.block(blk) : nullptr;  // d_w partials, then d_b's
    for (int64_t t = blk * per; t < std::min(tokens, (blk + 1) * per); ++t) {
      const float *xr = x.ptr(t), *g = d_y.ptr(t);
      const VF m = hn::Set(df, mean[size_t(t)]), r = hn::Set(df, rstd[size_t(t)]);
      VD sg_lo = hn::Zero(dd), sg_hi = hn::Zero(dd), sgx_lo = hn::Zero(dd), sgx_hi = hn::Zero(dd);
      for_each_vector(c, [&](int64_t j, const MF* in) {
        const VF gv = load(g + j, in);  // zero past c: every term below vanishes
        const VF xh = hn::Mul(hn::Sub(load(xr + j, in), m), r);
        const VF wv = hn::LoadU(df, sc.w.data() + j);
        sum_products(sg_lo, sg_hi, gv, wv);
        sum_products(sgx_lo, sgx_hi, gv, wv, &xh);
        if (acc) {
          add_products(acc + j, gv, &xh);
          add_products(acc + sc.padded + j, gv, nullptr);
        }
      });
      const float a = float(total(sg_lo, sg_hi) / double(c));
      const float bb = float(total(sgx_lo, sgx_hi) / double(c));
      const VF av = hn::Set(df, a), bv = hn::Set(df, bb);
      const float* res = residual ? d_residual.ptr(t) : nullptr;
      float* dx = d_x.ptr(t);
      for_each_vector(c, [&](int64_t j, const MF* in) {
        const VF xh = hn::Mul(hn::Sub(load(xr + j, in), m), r);
        const VF gw = hn::Mul(load(g + j, in), hn::LoadU(df, sc.w.data() + j));
        VF v = hn::Mul(r, hn::Sub(hn::Sub(gw, av), hn::Mul(xh, bv)));
        if (res) v = hn::Add(load(res + j, in), v);
        store(v, dx + j, in);
      });
    }
  });
  sc.reduce(d_w, 0, blocks);
  sc.reduce(d_b, 1, blocks);
}

void rms_norm_backward(View2 d_x, std::span<float> d_w, ConstView2 d_y, ConstView2 x,
                       std::span<const float> w, std::span<const float> rstd, ConstView2 d_residual) {
  const char* fn = "rms_norm_backward";
  nn::check_norm_backward(fn, d_x, d_w, {}, d_y, x, w, {}, rstd, d_residual, false);
  const int64_t tokens = x.shape[0], c = x.shape[1];
  if (tokens == 0) return;
  const int64_t per = rows_per_block(tokens, c), blocks = (tokens + per - 1) / per;
  NormScratch sc(w, c, blocks, d_w.empty() ? 0 : 1);
  const bool residual = nn::present(d_residual);
  parallel_for(blocks, [&](int64_t blk) {
    const DF df;
    const DD dd;
    double* acc = d_w.empty() ? nullptr : sc.block(blk);
    for (int64_t t = blk * per; t < std::min(tokens, (blk + 1) * per); ++t) {
      const float *xr = x.ptr(t), *g = d_y.ptr(t);
      const float r = rstd[size_t(t)];
      const VF rv = hn::Set(df, r);
      VD s_lo = hn::Zero(dd), s_hi = hn::Zero(dd);
      for_each_vector(c, [&](int64_t j, const MF* in) {
        const VF gv = load(g + j, in), xv = load(xr + j, in);
        const VF wv = hn::LoadU(df, sc.w.data() + j);
        sum_products(s_lo, s_hi, gv, wv, &xv);
        if (acc) {
          const VF xr_v = hn::Mul(xv, rv);
          add_products(acc + j, gv, &xr_v);
        }
      });
      const float k = float(total(s_lo, s_hi) / double(c) * double(r) * double(r));
      const VF kv = hn::Set(df, k);
      const float* res = residual ? d_residual.ptr(t) : nullptr;
      float* dx = d_x.ptr(t);
      for_each_vector(c, [&](int64_t j, const MF* in) {
        const VF gw = hn::Mul(load(g + j, in), hn::LoadU(df, sc.w.data() + j));
        VF v = hn::Mul(rv, hn::Sub(gw, hn::Mul(load(xr + j, in), kv)));
        if (res) v = hn::Add(load(res + j, in), v);
        store(v, dx + j, in);
      });
    }
  });
  sc.reduce(d_w, 0, blocks);
}

}  // namespace attnkit
