// Python bindings for the NCHW layers (conv2d, pooling, global pooling, batch norm 2d, SE, CBAM):
// float32 numpy arrays in (made C-contiguous), new arrays out, functions named nn_<layer>_....
// Backward bindings start parameter gradients from zero, so they return the gradient itself
// (the C++ API adds). python/attnkit/nn.py wraps these with keyword defaults.
#include <pybind11/stl.h>

#include <string>

#include "array_views.hpp"
#include "attnkit/nn/batch_norm2d.hpp"
#include "attnkit/nn/cbam.hpp"
#include "attnkit/nn/conv2d.hpp"
#include "attnkit/nn/global_pool.hpp"
#include "attnkit/nn/pool2d.hpp"
#include "attnkit/nn/se_block.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

using namespace pybind11::literals;
using Contig = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A C-contiguous float32 copy-or-view of obj and its rank-R view.
template <int R>
struct Arr {
  Contig array;
  View<const float, R> view;
  Arr(const py::object& obj, const char* name) {
    array = to_c_array<float>(as_float32(obj, name), name);
    view = const_view<R>(array, name);
  }
  int64_t size(int d) const { return view.shape[size_t(d)]; }
  std::span<const float> span() const { return {view.data, size_t(array.size())}; }
};

// The channel MLP of SE and of CBAM's channel gate: w1 [R, C], b1 [R] or empty, w2 [C, R],
// b2 [C] or empty, kept alive for the call.
struct ChannelMlp {
  Arr<2> w1, w2;
  std::vector<float> b1, b2;
  ChannelMlp(const py::object& w1_obj, const py::object& b1_obj, const py::object& w2_obj,
             const py::object& b2_obj)
      : w1(w1_obj, "w1"), w2(w2_obj, "w2"), b1(float_vector(b1_obj, "b1")),
        b2(float_vector(b2_obj, "b2")) {}
  SeWeights weights() const { return {w1.view, b1, w2.view, b2}; }
};

// Zeroed gradient arrays of a ChannelMlp.
struct ChannelMlpGrads {
  py::array_t<float> dw1, dw2, db1, db2;
  explicit ChannelMlpGrads(const ChannelMlp& m)
      : dw1(new_array({m.w1.size(0), m.w1.size(1)})), dw2(new_array({m.w2.size(0), m.w2.size(1)})),
        db1(new_array({py::ssize_t(m.b1.size())})), db2(new_array({py::ssize_t(m.b2.size())})) {}
  SeGrads views() { return {mutable_view<2>(dw1), span_of(db1), mutable_view<2>(dw2), span_of(db2)}; }
  // g["d_w1"], g["d_w2"], and g["d_b1"], g["d_b2"] for the biases m has.
  void add_to(py::dict& g, const ChannelMlp& m) const {
    g["d_w1"] = dw1;
    g["d_w2"] = dw2;
    if (!m.b1.empty()) g["d_b1"] = db1;
    if (!m.b2.empty()) g["d_b2"] = db2;
  }
};

// (y, grads or None) of a channel-attention block on x [N, C, H, W]: y from forward(y, cache)
// and, when d_y is given, grads = {"d_x": ...} plus what backward(d_x, d_y, cache, grads) adds.
// forward runs without the GIL; backward allocates its arrays and releases the GIL itself.
template <class Cache, class Forward, class Backward>
py::tuple gate_forward_backward(const Arr<4>& x, const py::object& dy_obj, Forward forward,
                                Backward backward) {
  auto y = new_array({x.size(0), x.size(1), x.size(2), x.size(3)});
  Cache cache;
  {
    py::gil_scoped_release nogil;
    forward(mutable_view<4>(y), cache);
  }
  if (dy_obj.is_none()) return py::make_tuple(y, py::none());
  Arr<4> d_y(dy_obj, "d_y");
  auto d_x = new_array({x.size(0), x.size(1), x.size(2), x.size(3)});
  py::dict g("d_x"_a = d_x);
  backward(mutable_view<4>(d_x), d_y.view, cache, g);
  return py::make_tuple(y, g);
}

std::vector<int32_t> index_vector(const py::object& obj, const char* name) {
  py::array raw = to_array(obj, name);
  require_integer(raw, name);
  auto a = to_c_array<int32_t>(raw, name);
  return std::vector<int32_t>(a.data(), a.data() + a.size());
}

void bind_conv_and_pool(py::module_& m) {
  m.def(
      "nn_conv2d_forward",
      [](py::object x_obj, py::object w_obj, py::object b_obj, int64_t stride, int64_t padding,
         bool reference) {
        Arr<4> x(x_obj, "x"), w(w_obj, "w");
        const auto b = float_vector(b_obj, "b");
        const Conv2dOptions o{.stride = stride, .padding = padding};
        check(stride >= 1, "conv2d: stride: expected >= 1, got ", stride);
        auto y = new_array({x.size(0), w.size(0), conv2d_output_size(x.size(2), w.size(2), stride, padding),
                        conv2d_output_size(x.size(3), w.size(3), stride, padding)});
        py::gil_scoped_release nogil;
        (reference ? conv2d_forward_reference : conv2d_forward)(mutable_view<4>(y), x.view, w.view, b, o);
        return y;
      },
      "x"_a, "w"_a, "b"_a = py::none(), "stride"_a = 1, "padding"_a = 0, "reference"_a = false,
      "y[N, O, OH, OW] = conv2d(x[N, C, H, W], w[O, C, KH, KW]) + b[O].");
  m.def(
      "nn_conv2d_backward",
      [](py::object dy_obj, py::object x_obj, py::object w_obj, bool has_bias, int64_t stride,
         int64_t padding, bool reference) {
        Arr<4> d_y(dy_obj, "d_y"), x(x_obj, "x"), w(w_obj, "w");
        auto d_x = new_array({x.size(0), x.size(1), x.size(2), x.size(3)});
        auto d_w = new_array({w.size(0), w.size(1), w.size(2), w.size(3)});
        auto d_b = new_array({has_bias ? w.size(0) : 0});
        {
          py::gil_scoped_release nogil;
          (reference ? conv2d_backward_reference : conv2d_backward)(
              mutable_view<4>(d_x), mutable_view<4>(d_w), span_of(d_b), d_y.view, x.view, w.view,
              {.stride = stride, .padding = padding});
        }
        return py::make_tuple(d_x, d_w, maybe(has_bias, d_b));
      },
      "d_y"_a, "x"_a, "w"_a, "has_bias"_a, "stride"_a = 1, "padding"_a = 0, "reference"_a = false,
      "Gradients of conv2d: (d_x, d_w, d_b or None).");
  m.def(
      "nn_max_pool2d_forward",
      [](py::object x_obj, int64_t kernel, int64_t stride, int64_t padding) {
        Arr<4> x(x_obj, "x");
        const Pool2dOptions o{.kernel = kernel, .stride = stride, .padding = padding};
        const int64_t s = stride ? stride : kernel;
        check(kernel >= 1 && s >= 1, "max_pool2d: kernel, stride: expected >= 1");
        auto y = new_array({x.size(0), x.size(1), conv2d_output_size(x.size(2), kernel, s, padding),
                        conv2d_output_size(x.size(3), kernel, s, padding)});
        py::array_t<int32_t> am(y.size());
        {
          py::gil_scoped_release nogil;
          max_pool2d_forward(mutable_view<4>(y), {am.mutable_data(), size_t(am.size())}, x.view, o);
        }
        return py::make_tuple(y, am);
      },
      "x"_a, "kernel"_a, "stride"_a = 0, "padding"_a = 0,
      "(y[N, C, OH, OW], argmax int32 [N·C·OH·OW]) of max pooling.");
  m.def(
      "nn_max_pool2d_backward",
      [](py::object dy_obj, py::object am_obj, int64_t h, int64_t w) {
        Arr<4> d_y(dy_obj, "d_y");
        const auto am = index_vector(am_obj, "argmax");
        auto d_x = new_array({d_y.size(0), d_y.size(1), h, w});
        py::gil_scoped_release nogil;
        max_pool2d_backward(mutable_view<4>(d_x), d_y.view, am);
        return d_x;
      },
      "d_y"_a, "argmax"_a, "h"_a, "w"_a, "d_x[N, C, h, w] of max pooling.");
  m.def(
      "nn_avg_pool2d_forward",
      [](py::object x_obj, int64_t kernel, int64_t stride, int64_t padding, bool include_pad) {
        Arr<4> x(x_obj, "x");
        const int64_t s = stride ? stride : kernel;
        check(kernel >= 1 && s >= 1, "avg_pool2d: kernel, stride: expected >= 1");
        auto y = new_array({x.size(0), x.size(1), conv2d_output_size(x.size(2), kernel, s, padding),
                        conv2d_output_size(x.size(3), kernel, s, padding)});
        py::gil_scoped_release nogil;
        avg_pool2d_forward(mutable_view<4>(y), x.view,
                           {.kernel = kernel, .stride = stride, .padding = padding,
                            .count_include_pad = include_pad});
        return y;
      },
      "x"_a, "kernel"_a, "stride"_a = 0, "padding"_a = 0, "count_include_pad"_a = true,
      "y[N, C, OH, OW] of average pooling.");
  m.def(
      "nn_avg_pool2d_backward",
      [](py::object dy_obj, int64_t h, int64_t w, int64_t kernel, int64_t stride, int64_t padding,
         bool include_pad) {
        Arr<4> d_y(dy_obj, "d_y");
        auto d_x = new_array({d_y.size(0), d_y.size(1), h, w});
        py::gil_scoped_release nogil;
        avg_pool2d_backward(mutable_view<4>(d_x), d_y.view,
                            {.kernel = kernel, .stride = stride, .padding = padding,
                             .count_include_pad = include_pad});
        return d_x;
      },
      "d_y"_a, "h"_a, "w"_a, "kernel"_a, "stride"_a = 0, "padding"_a = 0,
      "count_include_pad"_a = true, "d_x[N, C, h, w] of average pooling.");
  m.def(
      "nn_global_pool_forward",
      [](py::object x_obj, const std::string& mode) {
        Arr<4> x(x_obj, "x");
        check(mode == "avg" || mode == "max", "mode: expected 'avg' or 'max', got '", mode, "'");
        auto y = new_array({x.size(0), x.size(1)});
        py::array_t<int32_t> am(mode == "max" ? y.size() : 0);
        {
          py::gil_scoped_release nogil;
          if (mode == "avg") global_avg_pool_forward(mutable_view<2>(y), x.view);
          else global_max_pool_forward(mutable_view<2>(y), {am.mutable_data(), size_t(am.size())}, x.view);
        }
        return py::make_tuple(y, am);
      },
      "x"_a, "mode"_a, "(y[N, C], argmax int32 [N·C] (max) or empty (avg)).");
  m.def(
      "nn_global_pool_backward",
      [](py::object dy_obj, py::object am_obj, int64_t h, int64_t w, const std::string& mode) {
        Arr<2> d_y(dy_obj, "d_y");
        check(mode == "avg" || mode == "max", "mode: expected 'avg' or 'max', got '", mode, "'");
        const auto am = index_vector(am_obj, "argmax");
        auto d_x = new_array({d_y.size(0), d_y.size(1), h, w});
        py::gil_scoped_release nogil;
        if (mode == "avg") global_avg_pool_backward(mutable_view<4>(d_x), d_y.view);
        else global_max_pool_backward(mutable_view<4>(d_x), d_y.view, am);
        return d_x;
      },
      "d_y"_a, "argmax"_a, "h"_a, "w"_a, "mode"_a, "d_x[N, C, h, w] of global pooling.");
}

void bind_norm_and_attention(py::module_& m) {
  m.def(
      "nn_batch_norm2d_forward",
      [](py::object x_obj, py::object w_obj, py::object b_obj, py::object rm_obj, py::object rv_obj,
         bool training, float momentum, float eps, bool relu) {
        Arr<4> x(x_obj, "x");
        const auto w = float_vector(w_obj, "w"), b = float_vector(b_obj, "b");
        auto rm = float_vector(rm_obj, "running_mean"), rv = float_vector(rv_obj, "running_var");
        auto y = new_array({x.size(0), x.size(1), x.size(2), x.size(3)});
        auto mean = new_array({x.size(1)}), rstd = new_array({x.size(1)});
        {
          py::gil_scoped_release nogil;
          batch_norm2d_forward(mutable_view<4>(y), span_of(mean), span_of(rstd), rm, rv, x.view, w,
                               b, {.eps = eps, .momentum = momentum, .training = training, .relu = relu});
        }
        auto out_rm = new_array({py::ssize_t(rm.size())}), out_rv = new_array({py::ssize_t(rv.size())});
        std::copy(rm.begin(), rm.end(), out_rm.mutable_data());
        std::copy(rv.begin(), rv.end(), out_rv.mutable_data());
        return py::make_tuple(y, mean, rstd, out_rm, out_rv);
      },
      "x"_a, "w"_a, "b"_a, "running_mean"_a, "running_var"_a, "training"_a, "momentum"_a, "eps"_a,
      "relu"_a,
      "(y, mean[C], rstd[C], running_mean[C], running_var[C]) of batch norm 2d, followed by a ReLU "
      "if relu (the running statistics are returned updated; inputs are not modified).");
  m.def(
      "nn_batch_norm2d_backward",
      [](py::object dy_obj, py::object x_obj, py::object w_obj, py::object b_obj, py::object mean_obj,
         py::object rstd_obj, bool has_bias, bool training, bool relu) {
        Arr<4> d_y(dy_obj, "d_y"), x(x_obj, "x");
        const auto w = float_vector(w_obj, "w"), b = float_vector(b_obj, "b"),
                   mean = float_vector(mean_obj, "mean"), rstd = float_vector(rstd_obj, "rstd");
        auto d_x = new_array({x.size(0), x.size(1), x.size(2), x.size(3)});
        auto d_w = new_array({py::ssize_t(w.size())}), d_b = new_array({has_bias ? x.size(1) : 0});
        {
          py::gil_scoped_release nogil;
          batch_norm2d_backward(mutable_view<4>(d_x), span_of(d_w), span_of(d_b), d_y.view, x.view,
                                w, b, mean, rstd, {.training = training, .relu = relu});
        }
        return py::make_tuple(d_x, maybe(!w.empty(), d_w), maybe(has_bias, d_b));
      },
      "d_y"_a, "x"_a, "w"_a, "b"_a, "mean"_a, "rstd"_a, "has_bias"_a, "training"_a, "relu"_a,
      "Gradients of batch norm 2d (followed by a ReLU if relu; b is read only then): (d_x, d_w or "
      "None, d_b or None).");
  m.def(
      "nn_se_block",
      [](py::object x_obj, py::object w1_obj, py::object b1_obj, py::object w2_obj,
         py::object b2_obj, py::object dy_obj) {
        Arr<4> x(x_obj, "x");
        const ChannelMlp mlp(w1_obj, b1_obj, w2_obj, b2_obj);
        const SeWeights wt = mlp.weights();
        return gate_forward_backward<SeCache>(
            x, dy_obj, [&](View4 y, SeCache& cache) { se_block_forward(y, cache, x.view, wt); },
            [&](View4 d_x, ConstView4 d_y, const SeCache& cache, py::dict& g) {
              ChannelMlpGrads mg(mlp);
              {
                py::gil_scoped_release nogil;
                se_block_backward(d_x, mg.views(), d_y, x.view, wt, cache);
              }
              mg.add_to(g, mlp);
            });
      },
      "x"_a, "w1"_a, "b1"_a, "w2"_a, "b2"_a, "d_y"_a = py::none(),
      "(y, grads dict or None) of the SE block; grads when d_y is given.");
  m.def(
      "nn_cbam",
      [](py::object x_obj, py::object w1_obj, py::object b1_obj, py::object w2_obj,
         py::object b2_obj, py::object ws_obj, py::object bs_obj, py::object dy_obj) {
        Arr<4> x(x_obj, "x"), ws(ws_obj, "ws");
        const ChannelMlp mlp(w1_obj, b1_obj, w2_obj, b2_obj);
        const auto bs = float_vector(bs_obj, "bs");
        const CbamWeights wt{mlp.weights(), ws.view, bs};
        return gate_forward_backward<CbamCache>(
            x, dy_obj, [&](View4 y, CbamCache& cache) { cbam_forward(y, cache, x.view, wt); },
            [&](View4 d_x, ConstView4 d_y, const CbamCache& cache, py::dict& g) {
              ChannelMlpGrads mg(mlp);
              auto dws = new_array({ws.size(0), ws.size(1), ws.size(2), ws.size(3)});
              auto dbs = new_array({py::ssize_t(bs.size())});
              {
                py::gil_scoped_release nogil;
                cbam_backward(d_x, {mg.views(), mutable_view<4>(dws), span_of(dbs)}, d_y, x.view,
                              wt, cache);
              }
              mg.add_to(g, mlp);
              g["d_ws"] = dws;
              if (!bs.empty()) g["d_bs"] = dbs;
            });
      },
      "x"_a, "w1"_a, "b1"_a, "w2"_a, "b2"_a, "ws"_a, "bs"_a, "d_y"_a = py::none(),
      "(y, grads dict or None) of CBAM; grads when d_y is given.");
}

}  // namespace

void bind_vision(py::module_& m) {
  bind_conv_and_pool(m);
  bind_norm_and_attention(m);
}

}  // namespace attnkit::python
