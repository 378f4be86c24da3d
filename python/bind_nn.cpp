// Python bindings for the nn layers (include/attnkit/nn/*.hpp): float32 numpy arrays in, new
// numpy arrays out, functions named nn_<layer>_<forward|backward>. Every function takes
// `reference` to run the double-precision reference instead of the fast path. Backward bindings
// start parameter gradients from zero, so they return the gradient itself (the C++ API adds).
// python/attnkit/nn.py wraps these with keyword defaults.
#include <algorithm>
#include <optional>
#include <string>

#include "array_views.hpp"
#include "attnkit/nn/activation.hpp"
#include "attnkit/nn/cross_entropy.hpp"
#include "attnkit/nn/dropout.hpp"
#include "attnkit/nn/embedding.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/norm.hpp"
#include "attnkit/nn/rope.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

using namespace pybind11::literals;

// True if every dimension's stride is at least the span of the dimensions inside it (no negative,
// broadcast or overlapping strides), which the nn views require.
bool nested_strides(const py::array& a) {
  py::ssize_t inner = 4;  // bytes spanned by the dimensions inside d
  for (py::ssize_t d = a.ndim() - 1; d >= 0; --d) {
    if (a.shape(d) > 1 && a.strides(d) < inner) return false;
    inner = a.shape(d) > 1 ? a.strides(d) * a.shape(d) : inner;
  }
  return true;
}

// A float32 array kept alive for the call and its rank-R read-only view (strided slices are used
// in place; reversed or broadcast arrays are copied once).
template <int R>
struct In {
  py::array array;
  View<const float, R> view;
  In(const py::object& obj, const char* name) : array(as_float32(obj, name)) {
    if (!nested_strides(array))
      array = to_c_array<float>(array, name);
    view = const_view<R>(array, name);
  }
  int64_t size(int d) const { return view.shape[size_t(d)]; }
};

// An optional rank-R input: None gives no array and an empty view (an absent optional operand).
template <int R>
struct OptionalIn {
  std::optional<In<R>> in;
  View<const float, R> view{};
  OptionalIn(const py::object& obj, const char* name) {
    if (obj.is_none()) return;
    in.emplace(obj, name);
    view = in->view;
  }
};

// int64 vector from a 1-D integer array.
std::vector<int64_t> int64_vector(const py::object& obj, const char* name) {
  py::array a = to_array(obj, name);
  require_integer(a, name);
  check(a.ndim() == 1, name, ": expected 1 dimension, got ", a.ndim());
  auto c = to_c_array<int64_t>(a, name);
  return std::vector<int64_t>(c.data(), c.data() + c.size());
}

std::vector<int32_t> ids_vector(const py::object& obj, const char* name) {
  check(!obj.is_none(), name, ": expected a 1-D integer array, got None");
  return int32_vector(obj, name);
}

// A new zeroed float32 array of x's shape [T, C], filled by fn(its view) with the GIL released.
template <class Fn>
py::array_t<float> new_rows_like(const In<2>& x, Fn fn) {
  auto y = new_array({x.size(0), x.size(1)});
  const View2 v = mutable_view<2>(y);
  py::gil_scoped_release nogil;
  fn(v);
  return y;
}

GeluApproximation gelu_approx(const std::string& s) {
  if (s == "none") return GeluApproximation::kNone;
  if (s == "tanh") return GeluApproximation::kTanh;
  fail("approximate: expected 'none' or 'tanh', got '", s, "'");
}

// y[T, out] = x[T, in]·w[out, in]ᵀ + b[out] through `fast` or `ref` (linear_forward and
// logits_forward share this contract); `x_name` names x in errors.
using MatmulBias = void (*)(View2, ConstView2, ConstView2, std::span<const float>);
py::array_t<float> matmul_bias(MatmulBias fast, MatmulBias ref, const py::object& x_obj,
                               const py::object& w_obj, const py::object& b_obj, bool reference,
                               const char* x_name) {
  In<2> x(x_obj, x_name), w(w_obj, "w");
  const auto b = float_vector(b_obj, "b");
  auto y = new_array({x.size(0), w.size(0)});
  py::gil_scoped_release nogil;
  (reference ? ref : fast)(mutable_view<2>(y), x.view, w.view, b);
  return y;
}

void bind_linear_and_embedding(py::module_& m) {
  m.def(
      "nn_linear_forward",
      [](py::object x, py::object w, py::object b, bool reference) {
        return matmul_bias(linear_forward, linear_forward_reference, x, w, b, reference, "x");
      },
      "x"_a, "w"_a, "b"_a = py::none(), "reference"_a = false,
      "y[T, out] = x[T, in]·w[out, in]ᵀ + b[out] (b None: no bias).");
  m.def(
      "nn_linear_backward",
      [](py::object dy_obj, py::object x_obj, py::object w_obj, bool has_bias, bool reference) {
        In<2> d_y(dy_obj, "d_y"), x(x_obj, "x"), w(w_obj, "w");
        auto d_x = new_array({x.size(0), x.size(1)}), d_w = new_array({w.size(0), w.size(1)});
        auto d_b = new_array({has_bias ? w.size(0) : 0});
        {
          py::gil_scoped_release nogil;
          (reference ? linear_backward_reference : linear_backward)(
              mutable_view<2>(d_x), mutable_view<2>(d_w), span_of(d_b), d_y.view, x.view, w.view);
        }
        return py::make_tuple(d_x, d_w, maybe(has_bias, d_b));
      },
      "d_y"_a, "x"_a, "w"_a, "has_bias"_a, "reference"_a = false,
      "Gradients of linear from d_y[T, out] -> (d_x[T, in], d_w[out, in], d_b[out] or None).");
  m.def(
      "nn_embedding_forward",
      [](py::object ids_obj, py::object table_obj, bool reference) {
        const auto ids = ids_vector(ids_obj, "ids");
        In<2> table(table_obj, "table");
        auto y = new_array({py::ssize_t(ids.size()), table.size(1)});
        py::gil_scoped_release nogil;
        (reference ? embedding_forward_reference : embedding_forward)(mutable_view<2>(y), ids,
                                                                      table.view);
        return y;
      },
      "ids"_a, "table"_a, "reference"_a = false, "y[T, C] = table[V, C][ids[T]].");
  m.def(
      "nn_embedding_backward",
      [](py::object dy_obj, py::object ids_obj, int64_t vocab_size, bool reference) {
        In<2> d_y(dy_obj, "d_y");
        const auto ids = ids_vector(ids_obj, "ids");
        check(vocab_size >= 0, "vocab_size: expected >= 0, got ", vocab_size);
        auto d_table = new_array({vocab_size, d_y.size(1)});
        py::gil_scoped_release nogil;
        (reference ? embedding_backward_reference : embedding_backward)(mutable_view<2>(d_table),
                                                                        ids, d_y.view);
        return d_table;
      },
      "d_y"_a, "ids"_a, "vocab_size"_a, "reference"_a = false,
      "d_table[V, C] with d_table[ids[t]] += d_y[t] (repeated ids accumulate).");
}

void bind_norms(py::module_& m) {
  m.def(
      "nn_layer_norm_forward",
      [](py::object x_obj, py::object w_obj, py::object b_obj, float eps, bool reference) {
        In<2> x(x_obj, "x");
        const auto w = float_vector(w_obj, "w"), b = float_vector(b_obj, "b");
        auto y = new_array({x.size(0), x.size(1)}), mean = new_array({x.size(0)}),
             rstd = new_array({x.size(0)});
        {
          py::gil_scoped_release nogil;
          (reference ? layer_norm_forward_reference : layer_norm_forward)(
              mutable_view<2>(y), span_of(mean), span_of(rstd), x.view, w, b, eps);
        }
        return py::make_tuple(y, mean, rstd);
      },
      "x"_a, "w"_a, "b"_a, "eps"_a, "reference"_a = false,
      "LayerNorm over the last dimension of x[T, C] -> (y[T, C], mean[T], rstd[T]).");
  m.def(
      "nn_layer_norm_backward",
      [](py::object dy_obj, py::object x_obj, py::object w_obj, py::object mean_obj,
         py::object rstd_obj, bool has_bias, py::object residual_obj, bool reference) {
        In<2> d_y(dy_obj, "d_y"), x(x_obj, "x");
        const OptionalIn<2> d_residual(residual_obj, "d_residual");
        const auto w = float_vector(w_obj, "w");
        const auto mean = float_vector(mean_obj, "mean"), rstd = float_vector(rstd_obj, "rstd");
        auto d_x = new_array({x.size(0), x.size(1)});
        auto d_w = new_array({py::ssize_t(w.size())}), d_b = new_array({has_bias ? x.size(1) : 0});
        {
          py::gil_scoped_release nogil;
          (reference ? layer_norm_backward_reference : layer_norm_backward)(
              mutable_view<2>(d_x), span_of(d_w), span_of(d_b), d_y.view, x.view, w, mean, rstd,
              d_residual.view);
        }
        return py::make_tuple(d_x, maybe(!w.empty(), d_w), maybe(has_bias, d_b));
      },
      "d_y"_a, "x"_a, "w"_a, "mean"_a, "rstd"_a, "has_bias"_a, "d_residual"_a = py::none(),
      "reference"_a = false,
      "Gradients of layer_norm -> (d_x[T, C], d_w[C] or None, d_b[C] or None); d_x includes "
      "d_residual[T, C] when given.");
  m.def(
      "nn_rms_norm_forward",
      [](py::object x_obj, py::object w_obj, float eps, bool reference) {
        In<2> x(x_obj, "x");
        const auto w = float_vector(w_obj, "w");
        auto y = new_array({x.size(0), x.size(1)}), rstd = new_array({x.size(0)});
        {
          py::gil_scoped_release nogil;
          (reference ? rms_norm_forward_reference : rms_norm_forward)(
              mutable_view<2>(y), span_of(rstd), x.view, w, eps);
        }
        return py::make_tuple(y, rstd);
      },
      "x"_a, "w"_a, "eps"_a, "reference"_a = false,
      "RMSNorm (Llama) over the last dimension of x[T, C] -> (y[T, C], rstd[T]).");
  m.def(
      "nn_rms_norm_backward",
      [](py::object dy_obj, py::object x_obj, py::object w_obj, py::object rstd_obj,
         py::object residual_obj, bool reference) {
        In<2> d_y(dy_obj, "d_y"), x(x_obj, "x");
        const OptionalIn<2> d_residual(residual_obj, "d_residual");
        const auto w = float_vector(w_obj, "w"), rstd = float_vector(rstd_obj, "rstd");
        auto d_x = new_array({x.size(0), x.size(1)}), d_w = new_array({py::ssize_t(w.size())});
        {
          py::gil_scoped_release nogil;
          (reference ? rms_norm_backward_reference : rms_norm_backward)(
              mutable_view<2>(d_x), span_of(d_w), d_y.view, x.view, w, rstd, d_residual.view);
        }
        return py::make_tuple(d_x, maybe(!w.empty(), d_w));
      },
      "d_y"_a, "x"_a, "w"_a, "rstd"_a, "d_residual"_a = py::none(), "reference"_a = false,
      "Gradients of rms_norm -> (d_x[T, C], d_w[C] or None); d_x includes d_residual[T, C] when "
      "given.");
}

void bind_activations(py::module_& m) {
  m.def(
      "nn_gelu_forward",
      [](py::object x_obj, const std::string& approximate, bool reference) {
        In<2> x(x_obj, "x");
        const auto a = gelu_approx(approximate);
        return new_rows_like(x, [&](View2 y) {
          (reference ? gelu_forward_reference : gelu_forward)(y, x.view, a);
        });
      },
      "x"_a, "approximate"_a = "none", "reference"_a = false,
      "GELU of x[T, C] ('none' = erf, 'tanh').");
  m.def(
      "nn_gelu_backward",
      [](py::object dy_obj, py::object x_obj, const std::string& approximate, bool reference) {
        In<2> d_y(dy_obj, "d_y"), x(x_obj, "x");
        const auto a = gelu_approx(approximate);
        return new_rows_like(x, [&](View2 d_x) {
          (reference ? gelu_backward_reference : gelu_backward)(d_x, d_y.view, x.view, a);
        });
      },
      "d_y"_a, "x"_a, "approximate"_a = "none", "reference"_a = false, "d_x[T, C] of GELU.");
  m.def(
      "nn_silu_forward",
      [](py::object x_obj, bool reference) {
        In<2> x(x_obj, "x");
        return new_rows_like(x, [&](View2 y) {
          (reference ? silu_forward_reference : silu_forward)(y, x.view);
        });
      },
      "x"_a, "reference"_a = false, "SiLU x·sigmoid(x) of x[T, C].");
  m.def(
      "nn_silu_backward",
      [](py::object dy_obj, py::object x_obj, bool reference) {
        In<2> d_y(dy_obj, "d_y"), x(x_obj, "x");
        return new_rows_like(x, [&](View2 d_x) {
          (reference ? silu_backward_reference : silu_backward)(d_x, d_y.view, x.view);
        });
      },
      "d_y"_a, "x"_a, "reference"_a = false, "d_x[T, C] of SiLU.");
  m.def(
      "nn_swiglu_forward",
      [](py::object g_obj, py::object u_obj, bool reference) {
        In<2> gate(g_obj, "gate"), up(u_obj, "up");
        return new_rows_like(gate, [&](View2 y) {
          (reference ? swiglu_forward_reference : swiglu_forward)(y, gate.view, up.view);
        });
      },
      "gate"_a, "up"_a, "reference"_a = false, "silu(gate)·up for gate, up [T, C].");
  m.def(
      "nn_swiglu_backward",
      [](py::object dy_obj, py::object g_obj, py::object u_obj, bool reference) {
        In<2> d_y(dy_obj, "d_y"), gate(g_obj, "gate"), up(u_obj, "up");
        auto d_gate = new_array({gate.size(0), gate.size(1)}),
             d_up = new_array({gate.size(0), gate.size(1)});
        {
          py::gil_scoped_release nogil;
          (reference ? swiglu_backward_reference : swiglu_backward)(
              mutable_view<2>(d_gate), mutable_view<2>(d_up), d_y.view, gate.view, up.view);
        }
        return py::make_tuple(d_gate, d_up);
      },
      "d_y"_a, "gate"_a, "up"_a, "reference"_a = false, "Gradients of swiglu -> (d_gate, d_up).");
}

// A C-contiguous float32 copy of a [T, H, D] array, rotated in place by fn.
template <class Fn>
py::array_t<float> rope_copy(const py::object& x_obj, const py::object& pos_obj, double theta,
                             Fn fn, const char* name) {
  In<3> x(x_obj, name);
  const auto positions = int64_vector(pos_obj, "positions");
  auto out = new_array({x.size(0), x.size(1), x.size(2)});
  View3 v = mutable_view<3>(out);
  for (int64_t t = 0; t < v.shape[0]; ++t)
    for (int64_t h = 0; h < v.shape[1]; ++h) std::copy_n(x.view.ptr(t, h), v.shape[2], v.ptr(t, h));
  py::gil_scoped_release nogil;
  fn(v, positions, RopeOptions{.theta = theta});
  return out;
}

void bind_rope_dropout(py::module_& m) {
  m.def(
      "nn_rope_forward",
      [](py::object x, py::object positions, double theta, bool reference) {
        return rope_copy(x, positions, theta, reference ? rope_forward_reference : rope_forward,
                         "x");
      },
      "x"_a, "positions"_a, "theta"_a = 10000.0, "reference"_a = false,
      "Rotary embedding (Llama rotate_half) of x[T, H, D] at positions[T] (a rotated copy).");
  m.def(
      "nn_rope_backward",
      [](py::object d_y, py::object positions, double theta, bool reference) {
        return rope_copy(d_y, positions, theta, reference ? rope_backward_reference : rope_backward,
                         "d_y");
      },
      "d_y"_a, "positions"_a, "theta"_a = 10000.0, "reference"_a = false,
      "d_x[T, H, D] of rope: d_y rotated by the negative angles.");
  auto dropout = [](bool backward) {
    return [backward](py::object x_obj, float p, uint64_t seed, uint32_t stream, bool reference) {
      In<2> x(x_obj, backward ? "d_y" : "x");
      const DropoutOptions o{.p = p, .seed = seed, .stream = stream};
      return new_rows_like(x, [&](View2 y) {
        if (backward)
          (reference ? dropout_backward_reference : dropout_backward)(y, x.view, o);
        else
          (reference ? dropout_forward_reference : dropout_forward)(y, x.view, o);
      });
    };
  };
  m.def("nn_dropout_forward", dropout(false), "x"_a, "p"_a, "seed"_a, "stream"_a = 0,
        "reference"_a = false,
        "Inverted dropout of x[T, C]: x·keep/(1 - p), mask from (seed, stream).");
  m.def("nn_dropout_backward", dropout(true), "d_y"_a, "p"_a, "seed"_a, "stream"_a = 0,
        "reference"_a = false, "d_x[T, C] of dropout with the forward's (regenerated) mask.");
  m.def(
      "nn_dropout_mask",
      [](int64_t rows, int64_t cols, float p, uint64_t seed, uint32_t stream) {
        check(rows >= 0 && cols >= 0, "rows, cols: expected >= 0, got ", rows, ", ", cols);
        check(p >= 0 && p < 1, "p: expected a value in [0, 1), got ", p);
        py::array_t<bool> keep({rows, cols});
        bool* out = keep.mutable_data();
        const DropoutOptions o{.p = p, .seed = seed, .stream = stream};
        for (int64_t i = 0; i < rows * cols; ++i) out[i] = dropout_keeps(o, uint64_t(i));
        return keep;
      },
      "rows"_a, "cols"_a, "p"_a, "seed"_a, "stream"_a = 0,
      "Keep mask [rows, cols] (bool) that nn dropout uses for (seed, stream).");
}

void bind_cross_entropy(py::module_& m) {
  m.def(
      "nn_cross_entropy_forward",
      [](py::object z_obj, py::object t_obj, bool reference) {
        In<2> logits(z_obj, "logits");
        const auto targets = ids_vector(t_obj, "targets");
        auto losses = new_array({py::ssize_t(targets.size())}),
             lse = new_array({py::ssize_t(targets.size())});
        float loss;
        {
          py::gil_scoped_release nogil;
          loss = (reference ? cross_entropy_forward_reference : cross_entropy_forward)(
              span_of(losses), span_of(lse), logits.view, targets);
        }
        return py::make_tuple(loss, losses, lse);
      },
      "logits"_a, "targets"_a, "reference"_a = false,
      "Mean cross-entropy of logits[T, V] (negative target = ignore) -> (loss, losses[T], "
      "lse[T]).");
  m.def(
      "nn_cross_entropy_backward",
      [](py::object z_obj, py::object t_obj, py::object lse_obj, float d_loss, bool reference) {
        In<2> logits(z_obj, "logits");
        const auto targets = ids_vector(t_obj, "targets");
        const auto lse = float_vector(lse_obj, "lse");
        auto d = new_array({logits.size(0), logits.size(1)});
        py::gil_scoped_release nogil;
        (reference ? cross_entropy_backward_reference : cross_entropy_backward)(
            mutable_view<2>(d), logits.view, targets, lse, d_loss);
        return d;
      },
      "logits"_a, "targets"_a, "lse"_a, "d_loss"_a = 1.0f, "reference"_a = false,
      "d_logits[T, V] = (softmax - onehot)·d_loss/n_valid.");
}

void bind_linear_cross_entropy(py::module_& m) {
  m.def(
      "nn_linear_cross_entropy_forward",
      [](py::object h_obj, py::object w_obj, py::object t_obj, py::object b_obj, bool reference) {
        In<2> h(h_obj, "h"), w(w_obj, "w");
        const auto targets = ids_vector(t_obj, "targets");
        const auto b = float_vector(b_obj, "b");
        auto losses = new_array({py::ssize_t(targets.size())}),
             lse = new_array({py::ssize_t(targets.size())});
        float loss;
        {
          py::gil_scoped_release nogil;
          loss =
              (reference ? linear_cross_entropy_forward_reference : linear_cross_entropy_forward)(
                  span_of(losses), span_of(lse), h.view, w.view, b, targets);
        }
        return py::make_tuple(loss, losses, lse);
      },
      "h"_a, "w"_a, "targets"_a, "b"_a = py::none(), "reference"_a = false,
      "Fused LM head + mean cross-entropy of h[T, C]·w[V, C]ᵀ + b -> (loss, losses[T], lse[T]).");
  m.def(
      "nn_linear_cross_entropy_backward",
      [](py::object h_obj, py::object w_obj, py::object t_obj, py::object lse_obj, py::object b_obj,
         float d_loss, bool reference) {
        In<2> h(h_obj, "h"), w(w_obj, "w");
        const auto targets = ids_vector(t_obj, "targets");
        const auto b = float_vector(b_obj, "b"), lse = float_vector(lse_obj, "lse");
        auto d_h = new_array({h.size(0), h.size(1)}), d_w = new_array({w.size(0), w.size(1)});
        auto d_b = new_array({py::ssize_t(b.size())});
        {
          py::gil_scoped_release nogil;
          (reference ? linear_cross_entropy_backward_reference : linear_cross_entropy_backward)(
              mutable_view<2>(d_h), mutable_view<2>(d_w), span_of(d_b), h.view, w.view, b, targets,
              lse, d_loss);
        }
        return py::make_tuple(d_h, d_w, maybe(!b.empty(), d_b));
      },
      "h"_a, "w"_a, "targets"_a, "lse"_a, "b"_a = py::none(), "d_loss"_a = 1.0f,
      "reference"_a = false,
      "Gradients of the fused loss -> (d_h[T, C], d_w[V, C], d_b[V] or None).");
  m.def(
      "nn_logits_forward",
      [](py::object h, py::object w, py::object b, bool reference) {
        return matmul_bias(logits_forward, logits_forward_reference, h, w, b, reference, "h");
      },
      "h"_a, "w"_a, "b"_a = py::none(), "reference"_a = false,
      "logits[T, V] = h[T, C]·w[V, C]ᵀ + b.");
}

}  // namespace

void bind_nn(py::module_& m) {
  bind_linear_and_embedding(m);
  bind_norms(m);
  bind_activations(m);
  bind_rope_dropout(m);
  bind_cross_entropy(m);
  bind_linear_cross_entropy(m);
}

}  // namespace attnkit::python
