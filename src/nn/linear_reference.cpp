// Linear layer reference: scalar loops with double accumulation, the executable spec of
// linear.hpp. y[t, o] = Σ_i x[t, i]·W[o, i] + b[o];  d_x[t, i] = Σ_o d_y[t, o]·W[o, i];
// d_W[o, i] += Σ_t d_y[t, o]·x[t, i];  d_b[o] += Σ_t d_y[t, o].
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/linear.hpp"
#include "nn_common.hpp"

namespace attnkit {

void linear_forward_reference(View2 y, ConstView2 x, ConstView2 w, std::span<const float> b) {
  nn::check_linear_forward("linear_forward_reference", y, x, w, b);
  const int64_t in = x.shape[1], out = w.shape[0];
  const int64_t xs = x.stride[1], ws = w.stride[1];
  parallel_for(x.shape[0], [&](int64_t t) {  // rows are independent: any thread count
    const float* xr = x.ptr(t);  // row pointers with their strides: the same sums as x(t, i)
    for (int64_t o = 0; o < out; ++o) {
      const float* wr = w.ptr(o);
      double acc = b.empty() ? 0.0 : double(b[size_t(o)]);
      for (int64_t i = 0; i < in; ++i) acc += double(xr[i * xs]) * double(wr[i * ws]);
      y(t, o) = float(acc);
    }
  });
}

void linear_backward_reference(View2 d_x, View2 d_w, std::span<float> d_b, ConstView2 d_y,
                               ConstView2 x, ConstView2 w) {
  nn::check_linear_backward("linear_backward_reference", d_x, d_w, d_b, d_y, x, w);
  const int64_t tokens = x.shape[0], in = x.shape[1], out = w.shape[0];
  if (nn::present(d_x))
    parallel_for(tokens, [&](int64_t t) {
      for (int64_t i = 0; i < in; ++i) {
        double acc = 0;
        for (int64_t o = 0; o < out; ++o) acc += double(d_y(t, o)) * double(w(o, i));
        d_x(t, i) = float(acc);
      }
    });
  parallel_for(out, [&](int64_t o) {
    for (int64_t i = 0; i < in && nn::present(d_w); ++i) {
      double acc = 0;
      for (int64_t t = 0; t < tokens; ++t) acc += double(d_y(t, o)) * double(x(t, i));
      d_w(o, i) = float(double(d_w(o, i)) + acc);
    }
    if (!d_b.empty()) {
      double acc = 0;
      for (int64_t t = 0; t < tokens; ++t) acc += double(d_y(t, o));
      d_b[size_t(o)] = float(double(d_b[size_t(o)]) + acc);
    }
  });
}

}  // namespace attnkit
