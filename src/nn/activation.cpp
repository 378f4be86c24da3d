// Activation fast path: Highway vectors (static dispatch, AVX2 + FMA under -march=native) over
// contiguous rows, rows in parallel; a row's tail goes through a zero-padded vector so there is
// one code path per function. Exact GELU's Φ uses Abramowitz & Stegun 7.1.26 for erf (|error| <=
// 1.5e-7; PyTorch's vectorised CPU erf is the same formula), since Highway 1.0 has no Erf.
//   gelu_tanh(x) = x/2·(1 + tanh u), u = √(2/π)·(x + 0.044715·x³)
//     gelu_tanh'(x) = (1 + tanh u)/2 + x/2·(1 - tanh² u)·√(2/π)·(1 + 3·0.044715·x²)
//   gelu(x) = x·Φ(x), gelu'(x) = Φ(x) + x·φ(x)
//   silu(x) = x·σ(x), silu'(x) = σ(x)·(1 + x·(1 - σ(x)))
// PyTorch: F.gelu(x, approximate=...), F.silu(x), F.silu(gate) * up.
#include "attnkit/nn/activation.hpp"

#include <algorithm>
#include <cmath>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "nn_common.hpp"

namespace attnkit {
namespace nn {

void check_elementwise(const char* fn,
                       std::initializer_list<std::pair<const char*, ConstView2>> views) {
  const ConstView2& first = views.begin()->second;
  for (const auto& [name, v] : views)
    check_matrix(v, fn, name, "[T, C]", first.shape[0], first.shape[1]);
}

}  // namespace nn

namespace {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// Calls f(j, n_j, in, out) over [0, n) in vectors: f loads from the K input pointers and stores to
// the M output pointers it is given, which point into the rows or, for the tail, into zero-padded
// copies that are copied back afterwards.
template <size_t K, size_t M, class F>
void map_vectors(int64_t n, std::array<const float*, K> in, std::array<float*, M> out, F f) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    std::array<const float*, K> i;
    std::array<float*, M> o;
    for (size_t k = 0; k < K; ++k) i[k] = in[k] + j;
    for (size_t m = 0; m < M; ++m) o[m] = out[m] + j;
    f(d, i, o);
  }
  if (j == n) return;
  HWY_ALIGN float bi[K][kMaxLanes] = {}, bo[M][kMaxLanes] = {};
  std::array<const float*, K> i;
  std::array<float*, M> o;
  for (size_t k = 0; k < K; ++k) {
    std::copy(in[k] + j, in[k] + n, bi[k]);
    i[k] = bi[k];
  }
  for (size_t m = 0; m < M; ++m) o[m] = bo[m];
  f(d, i, o);
  for (size_t m = 0; m < M; ++m) std::copy(bo[m], bo[m] + (n - j), out[m] + j);
}

// Runs a row kernel over every row of [T, C] views in parallel.
template <size_t K, size_t M, class F>
void map_rows(std::array<ConstView2, K> in, std::array<View2, M> out, F f) {
  const int64_t c = in[0].shape[1];
  nn::parallel_each_row(in[0].shape[0], c, [&](int64_t t) {
    std::array<const float*, K> i;
    std::array<float*, M> o;
    for (size_t k = 0; k < K; ++k) i[k] = in[k].ptr(t);
    for (size_t m = 0; m < M; ++m) o[m] = out[m].ptr(t);
    map_vectors<K, M>(c, i, o, f);
  });
}

// σ(x) = 1/(1 + exp(-x)); the exponent is clamped to Highway Exp's accurate range, where σ is
// already 0 or 1 to float precision.
V sigmoid(D d, V x) {
  const V e = hn::Exp(d, hn::Min(hn::Max(hn::Neg(x), hn::Set(d, -87.0f)), hn::Set(d, 88.0f)));
  return hn::Div(hn::Set(d, 1.0f), hn::Add(hn::Set(d, 1.0f), e));
}

// Φ(x) and φ(x) of the standard normal. erf(z) = 1 - poly(t)·exp(-z²), t = 1/(1 + p·|z|),
// z = |x|/√2 (A&S 7.1.26), evaluated on the side that needs no cancellation: Φ(x) = h for x < 0
// and 1 - h otherwise, h = ½·poly(t)·exp(-x²/2). The exponent is clamped to Exp's range (Φ is
// then 0 or 1 to float precision).
void normal_cdf_pdf(D d, V x, V& cdf, V& pdf) {
  const V one = hn::Set(d, 1.0f), half_x2 = hn::Mul(hn::Set(d, 0.5f), hn::Mul(x, x));
  const V e = hn::Exp(d, hn::Max(hn::Neg(half_x2), hn::Set(d, -87.0f)));
  const V t = hn::Div(one, hn::MulAdd(hn::Set(d, 0.3275911f * float(M_SQRT1_2)), hn::Abs(x), one));
  V r = hn::MulAdd(hn::Set(d, 1.061405429f), t, hn::Set(d, -1.453152027f));
  r = hn::MulAdd(r, t, hn::Set(d, 1.421413741f));
  r = hn::MulAdd(r, t, hn::Set(d, -0.284496736f));
  r = hn::Mul(hn::MulAdd(r, t, hn::Set(d, 0.254829592f)), t);
  const V h = hn::Mul(hn::Mul(hn::Set(d, 0.5f), r), e);
  cdf = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), h, hn::Sub(one, h));
  pdf = hn::Mul(e, hn::Set(d, 0.3989422804014327f));  // 1/√(2π)
}

}  // namespace

void gelu_forward(View2 y, ConstView2 x, GeluApproximation approx) {
  nn::check_elementwise("gelu_forward", {{"x", x}, {"y", y}});
  if (approx == GeluApproximation::kNone) {
    map_rows<1, 1>({x}, {y}, [](D d, auto in, auto out) {
      const V v = hn::LoadU(d, in[0]);
      V cdf, pdf;
      normal_cdf_pdf(d, v, cdf, pdf);
      hn::StoreU(hn::Mul(v, cdf), d, out[0]);
    });
    return;
  }
  map_rows<1, 1>({x}, {y}, [](D d, auto in, auto out) {
    const V v = hn::LoadU(d, in[0]);
    const V u = hn::Mul(hn::Set(d, kSqrt2OverPi),
                        hn::MulAdd(hn::Mul(hn::Set(d, kGeluCoeff), hn::Mul(v, v)), v, v));
    const V th = hn::Tanh(d, u);
    hn::StoreU(hn::Mul(hn::Mul(hn::Set(d, 0.5f), v), hn::Add(hn::Set(d, 1.0f), th)), d, out[0]);
  });
}

void gelu_backward(View2 d_x, ConstView2 d_y, ConstView2 x, GeluApproximation approx) {
  nn::check_elementwise("gelu_backward", {{"x", x}, {"d_y", d_y}, {"d_x", d_x}});
  if (approx == GeluApproximation::kNone) {
    map_rows<2, 1>({d_y, x}, {d_x}, [](D d, auto in, auto out) {
      const V g = hn::LoadU(d, in[0]), v = hn::LoadU(d, in[1]);
      V cdf, pdf;
      normal_cdf_pdf(d, v, cdf, pdf);
      hn::StoreU(hn::Mul(g, hn::MulAdd(v, pdf, cdf)), d, out[0]);
    });
    return;
  }
  map_rows<2, 1>({d_y, x}, {d_x}, [](D d, auto in, auto out) {
    const V g = hn::LoadU(d, in[0]), v = hn::LoadU(d, in[1]);
    const V one = hn::Set(d, 1.0f), half = hn::Set(d, 0.5f), v2 = hn::Mul(v, v);
    const V u =
        hn::Mul(hn::Set(d, kSqrt2OverPi), hn::MulAdd(hn::Mul(hn::Set(d, kGeluCoeff), v2), v, v));
    const V th = hn::Tanh(d, u);
    const V du = hn::Mul(hn::Set(d, kSqrt2OverPi), hn::MulAdd(hn::Set(d, 3 * kGeluCoeff), v2, one));
    const V sech2 = hn::NegMulAdd(th, th, one);  // 1 - tanh²
    const V grad =
        hn::MulAdd(hn::Mul(half, v), hn::Mul(sech2, du), hn::Mul(half, hn::Add(one, th)));
    hn::StoreU(hn::Mul(g, grad), d, out[0]);
  });
}

void silu_forward(View2 y, ConstView2 x) {
  nn::check_elementwise("silu_forward", {{"x", x}, {"y", y}});
  map_rows<1, 1>({x}, {y}, [](D d, auto in, auto out) {
    const V v = hn::LoadU(d, in[0]);
    hn::StoreU(hn::Mul(v, sigmoid(d, v)), d, out[0]);
  });
}

void silu_backward(View2 d_x, ConstView2 d_y, ConstView2 x) {
  nn::check_elementwise("silu_backward", {{"x", x}, {"d_y", d_y}, {"d_x", d_x}});
  map_rows<2, 1>({d_y, x}, {d_x}, [](D d, auto in, auto out) {
    const V g = hn::LoadU(d, in[0]), v = hn::LoadU(d, in[1]);
    const V s = sigmoid(d, v), one = hn::Set(d, 1.0f);
    const V grad = hn::Mul(s, hn::MulAdd(v, hn::Sub(one, s), one));
    hn::StoreU(hn::Mul(g, grad), d, out[0]);
  });
}

void swiglu_forward(View2 y, ConstView2 gate, ConstView2 up) {
  nn::check_elementwise("swiglu_forward", {{"gate", gate}, {"up", up}, {"y", y}});
  map_rows<2, 1>({gate, up}, {y}, [](D d, auto in, auto out) {
    const V g = hn::LoadU(d, in[0]), u = hn::LoadU(d, in[1]);
    hn::StoreU(hn::Mul(hn::Mul(g, sigmoid(d, g)), u), d, out[0]);
  });
}

void swiglu_backward(View2 d_gate, View2 d_up, ConstView2 d_y, ConstView2 gate, ConstView2 up) {
  nn::check_elementwise(
      "swiglu_backward",
      {{"gate", gate}, {"up", up}, {"d_y", d_y}, {"d_gate", d_gate}, {"d_up", d_up}});
  map_rows<3, 2>({d_y, gate, up}, {d_gate, d_up}, [](D d, auto in, auto out) {
    const V dy = hn::LoadU(d, in[0]), g = hn::LoadU(d, in[1]), u = hn::LoadU(d, in[2]);
    const V s = sigmoid(d, g), one = hn::Set(d, 1.0f);
    const V dsilu = hn::Mul(s, hn::MulAdd(g, hn::Sub(one, s), one));
    hn::StoreU(hn::Mul(hn::Mul(dy, u), dsilu), d, out[0]);  // all loads precede the stores,
    hn::StoreU(hn::Mul(dy, hn::Mul(g, s)), d, out[1]);      // so outputs may alias inputs
  });
}

}  // namespace attnkit
