// Dropout reference: element (t, c) of [T, C] is x·1/(1 - p) (in double) if
// dropout_keeps(opts, t·C + c), else 0; one keep decision at a time.
#include "attnkit/nn/dropout.hpp"
#include "nn_common.hpp"

namespace attnkit {
namespace {

void apply_reference(View2 out, ConstView2 in, const DropoutOptions& o) {
  const int64_t c = in.shape[1];
  for (int64_t t = 0; t < in.shape[0]; ++t)
    for (int64_t j = 0; j < c; ++j) {
      const bool keep = dropout_keeps(o, uint64_t(t) * uint64_t(c) + uint64_t(j));
      out(t, j) = keep ? float(double(in(t, j)) / (1.0 - double(o.p))) : 0.0f;
    }
}

}  // namespace

void dropout_forward_reference(View2 y, ConstView2 x, const DropoutOptions& opts) {
  nn::check_elementwise("dropout_forward_reference", {{"x", x}, {"y", y}});
  nn::check_dropout("dropout_forward_reference", opts);
  apply_reference(y, x, opts);
}

void dropout_backward_reference(View2 d_x, ConstView2 d_y, const DropoutOptions& opts) {
  nn::check_elementwise("dropout_backward_reference", {{"d_y", d_y}, {"d_x", d_x}});
  nn::check_dropout("dropout_backward_reference", opts);
  apply_reference(d_x, d_y, opts);
}

}  // namespace attnkit
