// Row-parallel loops, the deterministic tiled parallel GEMM and double row reductions used by the
// nn layers (see nn_common.hpp).
#include "nn_common.hpp"

#include <algorithm>

#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"
#include "hwy/highway.h"

namespace attnkit::nn {
namespace hn = hwy::HWY_NAMESPACE;
namespace {
constexpr int64_t kElemsPerTask = 16384;  // ~64 KB of floats: amortises a task's dispatch
constexpr int64_t kTileM = 256;           // GEMM tile of C: rows
constexpr int64_t kTileN = 512;           // GEMM tile of C: columns
}  // namespace

void parallel_rows(int64_t n, int64_t width, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  const int64_t per = std::max<int64_t>(1, kElemsPerTask / std::max<int64_t>(width, 1));
  const int64_t blocks = (n + per - 1) / per;
  parallel_for(blocks, [&](int64_t blk) { body(blk * per, std::min(n, (blk + 1) * per)); });
}

void parallel_columns(int64_t cols, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  parallel_for(blocks, [&](int64_t blk) {
    body(blk * kColumnBlock, std::min(cols, (blk + 1) * kColumnBlock));
  });
}

void parallel_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                    const std::function<void(int64_t, int64_t, int64_t, int64_t)>& epilogue) {
  if (m <= 0 || n <= 0) return;
  const int64_t tiles_m = (m + kTileM - 1) / kTileM, tiles_n = (n + kTileN - 1) / kTileN;
  BlasThreadsScope blas(1);
  parallel_for(tiles_m * tiles_n, [&](int64_t idx) {
    const int64_t i0 = (idx / tiles_n) * kTileM, j0 = (idx % tiles_n) * kTileN;
    const int64_t i1 = std::min(m, i0 + kTileM), j1 = std::min(n, j0 + kTileN);
    // Row i of op(A) starts at a + i·lda (no transpose) or a + i (transpose); likewise op(B)'s
    // column j at b + j·ldb (transpose) or b + j.
    const float* a0 = ta ? a + i0 : a + i0 * lda;
    const float* b0 = tb ? b + j0 * ldb : b + j0;
    sgemm(ta, tb, i1 - i0, j1 - j0, k, alpha, a0, lda, b0, ldb, beta, c + i0 * ldc + j0, ldc);
    if (epilogue) epilogue(i0, i1, j0, j1);
  });
}

double sum_double(const float* x, int64_t n) {
  double acc[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += double(x[j + l]);
  double s = 0;
  for (; j < n; ++j) s += double(x[j]);
  for (double p : acc) s += p;
  return s;
}

double dot_double(const float* x, const float* y, int64_t n) {
  double acc[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += double(x[j + l]) * double(y[j + l]);
  double s = 0;
  for (; j < n; ++j) s += double(x[j]) * double(y[j]);
  for (double p : acc) s += p;
  return s;
}

// The two plane reductions below keep float partial sums in vector lanes over one plane (at most
// n / lanes terms each: 49 for a 28×28 plane with 16 lanes), then add each plane's total in
// double: the per-element work is float FMAs, and the planes are summed without drift.
void shifted_sums_double(const float* x, int64_t n, double k, double& s, double& q) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  const auto kv = hn::Set(df, float(k));
  auto as = hn::Zero(df), aq = hn::Zero(df);
  for (int64_t j = 0; j < n; j += lanes) {
    const auto in = hn::FirstN(df, size_t(n - j));
    const auto d = hn::IfThenElseZero(in, hn::Sub(hn::MaskedLoad(in, df, x + j), kv));
    as = hn::Add(as, d);
    aq = hn::MulAdd(d, d, aq);
  }
  s += double(hn::GetLane(hn::SumOfLanes(df, as)));
  q += double(hn::GetLane(hn::SumOfLanes(df, aq)));
}

void sum_and_dot_double(const float* g, const float* x, int64_t n, double& s, double& d) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  auto as = hn::Zero(df), ad = hn::Zero(df);
  for (int64_t j = 0; j < n; j += lanes) {
    const auto in = hn::FirstN(df, size_t(n - j));
    const auto gv = hn::MaskedLoad(in, df, g + j);
    as = hn::Add(as, gv);
    ad = hn::MulAdd(gv, hn::MaskedLoad(in, df, x + j), ad);
  }
  s += double(hn::GetLane(hn::SumOfLanes(df, as)));
  d += double(hn::GetLane(hn::SumOfLanes(df, ad)));
}

}  // namespace attnkit::nn
