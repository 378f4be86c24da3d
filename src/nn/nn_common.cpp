// Row-parallel loops, the deterministic tiled parallel GEMM and double row reductions used by the
// nn layers (see nn_common.hpp).
#include "nn_common.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"
#include "hwy/highway.h"
#include "ops/vector_loop.hpp"

namespace attnkit::nn {
namespace hn = hwy::HWY_NAMESPACE;
namespace {
constexpr int64_t kElemsPerTask = 16384;  // ~64 KB of floats: amortises a task's dispatch
constexpr int64_t kTileM = 512;           // GEMM tile of C: rows
constexpr int64_t kTileN = 512;           // GEMM tile of C: columns

// Tile extent for `extent` rows or columns: as few tiles as tiles of at most `most` allow, all
// of (nearly) one size, a multiple of 16 (the kernels' register blocks). Equal tiles share the
// work evenly: 688 columns as 2 × 344 rather than 512 + 176, which ran 3:1 on 2 threads.
int64_t even_tile(int64_t extent, int64_t most) {
  constexpr int64_t kAlign = 16;
  const int64_t tiles = (extent + most - 1) / most, size = (extent + tiles - 1) / tiles;
  return std::min(most, (size + kAlign - 1) / kAlign * kAlign);
}
}  // namespace

void parallel_rows(int64_t n, int64_t width, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  const int64_t per = std::max<int64_t>(1, kElemsPerTask / std::max<int64_t>(width, 1));
  const int64_t blocks = (n + per - 1) / per;
  parallel_for(blocks, [&](int64_t blk) { body(blk * per, std::min(n, (blk + 1) * per)); });
}

void parallel_fill(std::span<float> v, float value) {
  parallel_rows(int64_t(v.size()), 1, [&](int64_t i0, int64_t i1) {
    std::fill(v.begin() + i0, v.begin() + i1, value);
  });
}

int64_t first_non_finite(std::span<const float> v) {
  const int64_t n = int64_t(v.size()), blocks = (n + kElemsPerTask - 1) / kElemsPerTask;
  std::vector<uint8_t> bad(size_t(blocks), 0);
  parallel_for(blocks, [&](int64_t blk) {
    const int64_t i0 = blk * kElemsPerTask, i1 = std::min(n, i0 + kElemsPerTask);
    constexpr uint32_t kExponent = 0x7f800000u;  // all ones: inf or NaN
    uint32_t any = 0;
    for (int64_t i = i0; i < i1; ++i)
      any |= uint32_t((std::bit_cast<uint32_t>(v[size_t(i)]) & kExponent) == kExponent);
    bad[size_t(blk)] = uint8_t(any);
  });
  for (int64_t blk = 0; blk < blocks; ++blk) {
    if (!bad[size_t(blk)]) continue;
    for (int64_t i = blk * kElemsPerTask; i < n; ++i)
      if (!std::isfinite(v[size_t(i)])) return i;
  }
  return -1;
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
  int64_t tm = even_tile(m, kTileM), tn = even_tile(n, kTileN);
  // A long product (a weight gradient over many tokens) in fewer than kMinTiles tiles is split
  // further along its wider side: with 2 tiles, a thread slowed by the machine makes the other
  // wait for the whole difference; with 4 or more, the other thread takes its last tiles.
  constexpr int64_t kMinTiles = 4, kMinSide = 64;
  const bool long_product = double(m) * double(n) * double(k) >= double(1 << 24);
  while (long_product && ((m + tm - 1) / tm) * ((n + tn - 1) / tn) < kMinTiles) {
    if (tn >= tm && tn >= 2 * kMinSide) tn = even_tile(n, tn / 2);
    else if (tm >= 2 * kMinSide) tm = even_tile(m, tm / 2);
    else break;
  }
  const int64_t tiles_m = (m + tm - 1) / tm, tiles_n = (n + tn - 1) / tn;
  BlasThreadsScope blas(1);
  parallel_for(tiles_m * tiles_n, [&](int64_t idx) {
    const int64_t i0 = (idx / tiles_n) * tm, j0 = (idx % tiles_n) * tn;
    const int64_t i1 = std::min(m, i0 + tm), j1 = std::min(n, j0 + tn);
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

// The plane reduction below keeps float partial sums in vector lanes over one plane (at most
// n / lanes terms each: 49 for a 28×28 plane with 16 lanes), then adds the plane's total in
// double: the per-element work is float FMAs, and the planes are summed without drift.
void shifted_sums_double(const float* x, int64_t n, double k, double& s, double& q) {
  const hn::ScalableTag<float> df;
  const auto kv = hn::Set(df, float(k));
  auto as = hn::Zero(df), aq = hn::Zero(df);
  vec::for_each_vector(n, [&](int64_t j, const vec::MF* in) {
    auto d = hn::Sub(vec::load(x + j, in), kv);
    if (in) d = hn::IfThenElseZero(*in, d);  // lanes past n: 0, not -k
    as = hn::Add(as, d);
    aq = hn::MulAdd(d, d, aq);
  });
  s += double(hn::GetLane(hn::SumOfLanes(df, as)));
  q += double(hn::GetLane(hn::SumOfLanes(df, aq)));
}

}  // namespace attnkit::nn
