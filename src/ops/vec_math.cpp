// Highway implementations of the row primitives (static dispatch: the target this file is
// compiled for, AVX2 + FMA under -march=native here). Tails are handled with a masked load.
#include "attnkit/ops/vec_math.hpp"

#include <cmath>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

namespace attnkit {
namespace hn = hwy::HWY_NAMESPACE;

namespace {
using D = hn::ScalableTag<float>;
constexpr float kExpFloor = -64.0f;  // exp_sub_sum: x - m below this gives 0
}

// Four running maxima: one would chain every vector through the max's latency (a 512-key row of
// the flash forward took 32 dependent steps). For rows without NaN the max is exact and the order
// does not matter; a NaN may or may not reach the result (x86's max returns its second operand),
// which the callers' inputs, checked finite, do not produce.
float row_max(const float* x, int64_t n) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  auto acc0 = hn::Set(d, -std::numeric_limits<float>::infinity()), acc1 = acc0, acc2 = acc0,
       acc3 = acc0;
  int64_t j = 0;
  for (; j + 4 * lanes <= n; j += 4 * lanes) {
    acc0 = hn::Max(acc0, hn::LoadU(d, x + j));
    acc1 = hn::Max(acc1, hn::LoadU(d, x + j + lanes));
    acc2 = hn::Max(acc2, hn::LoadU(d, x + j + 2 * lanes));
    acc3 = hn::Max(acc3, hn::LoadU(d, x + j + 3 * lanes));
  }
  for (; j + lanes <= n; j += lanes) acc0 = hn::Max(acc0, hn::LoadU(d, x + j));
  const auto acc = hn::Max(hn::Max(acc0, acc1), hn::Max(acc2, acc3));
  float m = hn::GetLane(hn::MaxOfLanes(d, acc));
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

float exp_sub_sum(float* x, int64_t n, float m) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  const auto vm = hn::Set(d, m);
  // Terms below e^-64 (1.6e-28 of the row maximum's; -inf for a masked score) become exactly 0.
  // Not just their own rounding: such a probability times a value in the next GEMM (P·V) would
  // be a subnormal product, and subnormal FMAs take microcode assists. Steep ALiBi slopes put
  // many scores 64–87 below the row max: the forward spent 1.46x the CPU time with the old
  // cut-off at -87 (where Highway's Exp stops being accurate).
  const auto lo = hn::Set(d, kExpFloor);
  auto sum = hn::Zero(d);
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    const auto t = hn::Sub(hn::LoadU(d, x + j), vm);
    const auto e = hn::IfThenZeroElse(hn::Lt(t, lo), hn::Exp(d, hn::Max(t, lo)));
    hn::StoreU(e, d, x + j);
    sum = hn::Add(sum, e);
  }
  float s = hn::GetLane(hn::SumOfLanes(d, sum));
  for (; j < n; ++j) {
    const float t = x[j] - m;
    x[j] = t < kExpFloor ? 0.0f : std::exp(t);
    s += x[j];
  }
  return s;
}

void softcap_inplace(float* x, int64_t n, float c) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  const auto vc = hn::Set(d, c), inv = hn::Set(d, 1.0f / c);
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes)
    hn::StoreU(hn::Mul(vc, hn::Tanh(d, hn::Mul(hn::LoadU(d, x + j), inv))), d, x + j);
  for (; j < n; ++j) x[j] = c * std::tanh(x[j] / c);
}

void scale_inplace(float* x, int64_t n, float a) {
  for (int64_t j = 0; j < n; ++j) x[j] *= a;
}

float dot(const float* x, const float* y, int64_t n) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  auto acc = hn::Zero(d);
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes) acc = hn::MulAdd(hn::LoadU(d, x + j), hn::LoadU(d, y + j), acc);
  float s = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; j < n; ++j) s += x[j] * y[j];
  return s;
}

}  // namespace attnkit
