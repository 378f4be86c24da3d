// Python bindings for multi-scale deformable attention (attention/ms_deform_attn.hpp): float32
// numpy arrays in, new arrays out; `reference` selects the double-precision reference.
// python/attnkit/__init__.py wraps these as ms_deform_attn / ms_deform_attn_backward.
#include <string>
#include <vector>

#include "array_views.hpp"
#include "attnkit/attention/ms_deform_attn.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

using namespace pybind11::literals;

// An integer array of rank `rank` (and, for rank 2, last dimension 2) as a flat int64 vector.
std::vector<int64_t> int64_values(const py::object& obj, const char* name, int rank) {
  py::array a = to_array(obj, name);
  require_integer(a, name);
  check(a.ndim() == rank, name, ": expected ", rank, " dimension(s), got ", a.ndim());
  if (rank == 2) check(a.shape(1) == 2, name, ": expected shape [Lv, 2], got last dimension ", a.shape(1));
  auto c = to_c_array<int64_t>(a, name);
  return std::vector<int64_t>(c.data(), c.data() + c.size());
}

// Everything one call needs, kept alive for its duration.
struct Call {
  py::array value, loc, weights;
  std::vector<int64_t> shapes, starts;
  MsDeformAttnArgs args;
};

Call make_call(const py::object& value, const py::object& shapes, const py::object& starts,
               const py::object& loc, const py::object& weights) {
  Call c;
  c.value = as_float32(value, "value");
  c.loc = as_float32(loc, "sampling_locations");
  c.weights = as_float32(weights, "attention_weights");
  c.shapes = int64_values(shapes, "spatial_shapes", 2);
  c.starts = int64_values(starts, "level_start_index", 1);
  c.args.value = const_view<4>(c.value, "value");
  c.args.sampling_locations = const_view<6>(c.loc, "sampling_locations");
  c.args.attention_weights = const_view<5>(c.weights, "attention_weights");
  c.args.spatial_shapes = c.shapes;
  c.args.level_start_index = c.starts;
  return c;
}

py::array forward(const py::object& value, const py::object& shapes, const py::object& starts,
                  const py::object& loc, const py::object& weights, bool reference) {
  Call c = make_call(value, shapes, starts, loc, weights);
  validate(c.args, false);  // before allocating from the shapes
  const auto& v = c.args.value;
  auto out = new_array({v.shape[0], c.args.sampling_locations.shape[1], v.shape[2] * v.shape[3]});
  c.args.out = mutable_view<3>(out);
  {
    py::gil_scoped_release nogil;
    (reference ? ms_deform_attn_reference : ms_deform_attn)(c.args);
  }
  return out;
}

py::tuple backward(const py::object& d_out, const py::object& value, const py::object& shapes,
                   const py::object& starts, const py::object& loc, const py::object& weights,
                   bool reference) {
  Call c = make_call(value, shapes, starts, loc, weights);
  validate(c.args, false);
  py::array g = as_float32(d_out, "d_out");
  const auto& v = c.args.value;
  const auto& l = c.args.sampling_locations;
  auto d_value = new_array({v.shape[0], v.shape[1], v.shape[2], v.shape[3]});
  auto d_loc = new_array({l.shape[0], l.shape[1], l.shape[2], l.shape[3], l.shape[4], 2});
  auto d_w = new_array({l.shape[0], l.shape[1], l.shape[2], l.shape[3], l.shape[4]});
  const MsDeformAttnGrads grads{.d_out = const_view<3>(g, "d_out"),
                                .d_value = mutable_view<4>(d_value),
                                .d_sampling_locations = mutable_view<6>(d_loc),
                                .d_attention_weights = mutable_view<5>(d_w)};
  {
    py::gil_scoped_release nogil;
    (reference ? ms_deform_attn_reference_backward : ms_deform_attn_backward)(c.args, grads);
  }
  return py::make_tuple(d_value, d_loc, d_w);
}

}  // namespace

void bind_ms_deform_attn(py::module_& m) {
  m.def("_ms_deform_attn", &forward, "value"_a, "spatial_shapes"_a, "level_start_index"_a,
        "sampling_locations"_a, "attention_weights"_a, "reference"_a,
        "Multi-scale deformable attention -> out [B, Q, H·Dh].");
  m.def("_ms_deform_attn_backward", &backward, "d_out"_a, "value"_a, "spatial_shapes"_a,
        "level_start_index"_a, "sampling_locations"_a, "attention_weights"_a, "reference"_a,
        "Gradients of multi-scale deformable attention -> (d_value, d_sampling_locations, "
        "d_attention_weights).");
}

}  // namespace attnkit::python
