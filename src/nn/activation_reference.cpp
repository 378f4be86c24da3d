// Activation reference: the formulas of activation.hpp evaluated per element in double.
//   gelu(x) = x·Φ(x) = x/2·(1 + erf(x/√2));      gelu'(x) = Φ(x) + x·φ(x)
//   gelu_tanh(x) = x/2·(1 + tanh u), u = √(2/π)·(x + 0.044715·x³)
//   gelu_tanh'(x) = (1 + tanh u)/2 + x/2·(1 - tanh² u)·√(2/π)·(1 + 3·0.044715·x²)
//   silu(x) = x·σ(x);  silu'(x) = σ(x)·(1 + x·(1 - σ(x)));  swiglu(g, u) = silu(g)·u
#include <cmath>

#include "attnkit/nn/activation.hpp"
#include "nn_common.hpp"

namespace attnkit {
namespace {

constexpr double kSqrt2OverPiF64 = 0.79788456080286535588;
constexpr double kGeluCoeffF64 = 0.044715;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double gelu(double x, GeluApproximation a) {
  if (a == GeluApproximation::kNone) return 0.5 * x * (1.0 + std::erf(x * M_SQRT1_2));
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPiF64 * (x + kGeluCoeffF64 * x * x * x)));
}

double gelu_grad(double x, GeluApproximation a) {
  if (a == GeluApproximation::kNone)
    return 0.5 * (1.0 + std::erf(x * M_SQRT1_2)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  const double th = std::tanh(kSqrt2OverPiF64 * (x + kGeluCoeffF64 * x * x * x));
  return 0.5 * (1.0 + th) +
         0.5 * x * (1.0 - th * th) * kSqrt2OverPiF64 * (1.0 + 3.0 * kGeluCoeffF64 * x * x);
}

double silu_grad(double x) {
  const double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

// out(t, c) = f(t, c) over every element of [T, C].
template <class F>
void for_each(int64_t rows, int64_t cols, F f) {
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < cols; ++c) f(t, c);
}

}  // namespace

void gelu_forward_reference(View2 y, ConstView2 x, GeluApproximation approx) {
  nn::check_elementwise("gelu_forward_reference", {{"x", x}, {"y", y}});
  for_each(x.shape[0], x.shape[1],
           [&](int64_t t, int64_t c) { y(t, c) = float(gelu(double(x(t, c)), approx)); });
}

void gelu_backward_reference(View2 d_x, ConstView2 d_y, ConstView2 x, GeluApproximation approx) {
  nn::check_elementwise("gelu_backward_reference", {{"x", x}, {"d_y", d_y}, {"d_x", d_x}});
  for_each(x.shape[0], x.shape[1], [&](int64_t t, int64_t c) {
    d_x(t, c) = float(double(d_y(t, c)) * gelu_grad(double(x(t, c)), approx));
  });
}

void silu_forward_reference(View2 y, ConstView2 x) {
  nn::check_elementwise("silu_forward_reference", {{"x", x}, {"y", y}});
  for_each(x.shape[0], x.shape[1], [&](int64_t t, int64_t c) {
    const double v = double(x(t, c));
    y(t, c) = float(v * sigmoid(v));
  });
}

void silu_backward_reference(View2 d_x, ConstView2 d_y, ConstView2 x) {
  nn::check_elementwise("silu_backward_reference", {{"x", x}, {"d_y", d_y}, {"d_x", d_x}});
  for_each(x.shape[0], x.shape[1], [&](int64_t t, int64_t c) {
    d_x(t, c) = float(double(d_y(t, c)) * silu_grad(double(x(t, c))));
  });
}

void swiglu_forward_reference(View2 y, ConstView2 gate, ConstView2 up) {
  nn::check_elementwise("swiglu_forward_reference", {{"gate", gate}, {"up", up}, {"y", y}});
  for_each(gate.shape[0], gate.shape[1], [&](int64_t t, int64_t c) {
    const double g = double(gate(t, c));
    y(t, c) = float(g * sigmoid(g) * double(up(t, c)));
  });
}

void swiglu_backward_reference(View2 d_gate, View2 d_up, ConstView2 d_y, ConstView2 gate,
                               ConstView2 up) {
  nn::check_elementwise(
      "swiglu_backward_reference",
      {{"gate", gate}, {"up", up}, {"d_y", d_y}, {"d_gate", d_gate}, {"d_up", d_up}});
  for_each(gate.shape[0], gate.shape[1], [&](int64_t t, int64_t c) {
    const double g = double(gate(t, c)), u = double(up(t, c)), dy = double(d_y(t, c));
    d_gate(t, c) = float(dy * u * silu_grad(g));  // read everything first: outputs may alias
    d_up(t, c) = float(dy * g * sigmoid(g));
  });
}

}  // namespace attnkit
