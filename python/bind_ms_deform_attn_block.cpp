// Python bindings for the MSDeformAttn module (nn/ms_deform_attn_block.hpp): params as a dict of
// float32 arrays keyed by Deformable DETR's names, the cache as a dict of arrays, gradients as a
// fresh dict (the C++ API adds into buffers; here they start from zero). python/attnkit/deform.py
// wraps these.
#include <string>
#include <vector>

#include "array_views.hpp"
#include "attnkit/nn/ms_deform_attn_block.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

using namespace pybind11::literals;
using CArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

const char* const kMatrices[] = {"value_proj_weight", "sampling_offsets_weight",
                                 "attention_weights_weight", "output_proj_weight"};
const char* const kBiases[] = {"value_proj_bias", "sampling_offsets_bias",
                               "attention_weights_bias", "output_proj_bias"};
const char* const kCache[] = {"value", "offsets", "weights", "locations", "attn"};

// A C-contiguous float32 copy (or the array itself) of a required object.
CArray c_array(const py::object& obj, const char* name) {
  check(!obj.is_none(), name, ": expected a float32 array, got None");
  return to_c_array<float>(as_float32(obj, name), name);
}

template <int R>
View<const float, R> cview(const CArray& a, const char* name) {
  return const_view<R>(a, name);
}

std::vector<int64_t> ints(const py::object& obj, const char* name) {
  py::array a = to_array(obj, name);
  require_integer(a, name);
  auto c = to_c_array<int64_t>(a, name);
  return std::vector<int64_t>(c.data(), c.data() + c.size());
}

MsDeformAttnBlockOptions options(const py::dict& d, bool reference) {
  return {.d_model = d["d_model"].cast<int64_t>(),
          .heads = d["heads"].cast<int64_t>(),
          .levels = d["levels"].cast<int64_t>(),
          .points = d["points"].cast<int64_t>(),
          .reference = reference};
}

// Inputs and parameters kept alive for one call.
struct BlockCall {
  CArray query, ref, input;
  std::vector<int64_t> shapes, starts;
  std::vector<uint8_t> mask;
  std::vector<CArray> mats, biases;
  MsDeformAttnBlockInputs in;
  MsDeformAttnBlockParams params;
  MsDeformAttnBlockOptions opts;
};

BlockCall make_block_call(const py::object& query, const py::object& ref, const py::object& input,
                          const py::object& shapes, const py::object& starts, const py::object& mask,
                          const py::dict& params, const py::dict& opts, bool reference) {
  BlockCall c;
  c.opts = options(opts, reference);
  c.query = c_array(query, "query");
  c.ref = c_array(ref, "reference_points");
  c.input = c_array(input, "input_flatten");
  c.shapes = ints(shapes, "spatial_shapes");
  c.starts = ints(starts, "level_start_index");
  if (!mask.is_none()) {
    auto m = to_c_array<uint8_t>(to_array(mask, "padding_mask"), "padding_mask");
    c.mask.assign(m.data(), m.data() + m.size());
  }
  for (const char* name : kMatrices) {
    check(params.contains(name), "params: missing '", name, "'");
    c.mats.push_back(c_array(params[name], name));
  }
  for (const char* name : kBiases) {
    check(params.contains(name), "params: missing '", name, "'");
    c.biases.push_back(c_array(params[name], name));
  }
  c.in = {.query = cview<3>(c.query, "query"),
          .reference_points = cview<4>(c.ref, "reference_points"),
          .input_flatten = cview<3>(c.input, "input_flatten"),
          .spatial_shapes = c.shapes,
          .level_start_index = c.starts,
          .padding_mask = c.mask};
  auto span = [](const CArray& a) { return std::span<const float>(a.data(), size_t(a.size())); };
  c.params = {cview<2>(c.mats[0], kMatrices[0]), span(c.biases[0]),
              cview<2>(c.mats[1], kMatrices[1]), span(c.biases[1]),
              cview<2>(c.mats[2], kMatrices[2]), span(c.biases[2]),
              cview<2>(c.mats[3], kMatrices[3]), span(c.biases[3])};
  return c;
}

py::array_t<float> tensor_to_array(const Tensor<float, 2>& t) {
  auto a = new_array({t.shape()[0], t.shape()[1]});
  std::copy(t.data(), t.data() + t.numel(), a.mutable_data());
  return a;
}

Tensor<float, 2> array_to_tensor(const py::dict& cache, const char* name) {
  check(cache.contains(name), "cache: missing '", name, "'");
  const CArray a = c_array(cache[name], name);
  check(a.ndim() == 2, "cache['", name, "']: expected 2 dimensions");
  Tensor<float, 2> t({a.shape(0), a.shape(1)});
  std::copy(a.data(), a.data() + a.size(), t.data());
  return t;
}

py::tuple block_forward(const py::object& query, const py::object& ref, const py::object& input,
                        const py::object& shapes, const py::object& starts, const py::object& mask,
                        const py::dict& params, const py::dict& opts, bool reference) {
  BlockCall c = make_block_call(query, ref, input, shapes, starts, mask, params, opts, reference);
  validate_ms_deform_attn_block(c.in, c.params, c.opts);
  auto out = new_array({c.in.query.shape[0], c.in.query.shape[1], c.opts.d_model});
  MsDeformAttnBlockCache cache;
  {
    py::gil_scoped_release nogil;
    ms_deform_attn_block_forward(mutable_view<3>(out), cache, c.in, c.params, c.opts);
  }
  py::dict cd;
  const Tensor<float, 2>* parts[] = {&cache.value, &cache.offsets, &cache.weights,
                                     &cache.locations, &cache.attn};
  for (int i = 0; i < 5; ++i) cd[kCache[i]] = tensor_to_array(*parts[i]);
  return py::make_tuple(out, cd);
}

// The four matrices and four biases of w (weights or gradients) as numpy arrays, by name.
py::dict weights_dict(const MsDeformAttnBlockWeights& w) {
  const Tensor<float, 2>* mats[] = {&w.value_proj_weight, &w.sampling_offsets_weight,
                                    &w.attention_weights_weight, &w.output_proj_weight};
  const Tensor<float, 1>* biases[] = {&w.value_proj_bias, &w.sampling_offsets_bias,
                                      &w.attention_weights_bias, &w.output_proj_bias};
  py::dict d;
  for (int i = 0; i < 4; ++i) {
    d[kMatrices[i]] = tensor_to_array(*mats[i]);
    auto b = new_array({biases[i]->numel()});
    std::copy(biases[i]->data(), biases[i]->data() + biases[i]->numel(), b.mutable_data());
    d[kBiases[i]] = b;
  }
  return d;
}

py::tuple block_backward(const py::object& d_out_obj, const py::object& query, const py::object& ref,
                         const py::object& input, const py::object& shapes, const py::object& starts,
                         const py::object& mask, const py::dict& params, const py::dict& cache_d,
                         const py::dict& opts, bool reference) {
  BlockCall c = make_block_call(query, ref, input, shapes, starts, mask, params, opts, reference);
  validate_ms_deform_attn_block(c.in, c.params, c.opts);
  const CArray d_out = c_array(d_out_obj, "d_out");
  MsDeformAttnBlockCache cache;
  Tensor<float, 2>* parts[] = {&cache.value, &cache.offsets, &cache.weights, &cache.locations,
                               &cache.attn};
  for (int i = 0; i < 5; ++i) *parts[i] = array_to_tensor(cache_d, kCache[i]);
  const auto& q = c.in.query;
  const auto& x = c.in.input_flatten;
  auto d_q = new_array({q.shape[0], q.shape[1], q.shape[2]});
  auto d_x = new_array({x.shape[0], x.shape[1], x.shape[2]});
  auto d_r = new_array({q.shape[0], q.shape[1], c.opts.levels, 2});
  MsDeformAttnBlockWeights g(c.opts);
  {
    py::gil_scoped_release nogil;
    ms_deform_attn_block_backward(mutable_view<3>(d_q), mutable_view<3>(d_x),
                                  mutable_view<4>(d_r), g.grads(), cview<3>(d_out, "d_out"),
                                  c.in, cache, c.params, c.opts);
  }
  return py::make_tuple(d_q, d_x, d_r, weights_dict(g));
}

py::dict init(const py::dict& opts, uint64_t seed) {
  const MsDeformAttnBlockOptions o = options(opts, false);
  MsDeformAttnBlockWeights w(o);
  ms_deform_attn_block_init(w, o, seed);
  return weights_dict(w);
}

}  // namespace

void bind_ms_deform_attn_block(py::module_& m) {
  m.def("_ms_deform_attn_block_forward", &block_forward, "query"_a, "reference_points"_a,
        "input_flatten"_a, "spatial_shapes"_a, "level_start_index"_a, "padding_mask"_a,
        "params"_a, "opts"_a, "reference"_a,
        "MSDeformAttn forward -> (out [B, Q, C], cache dict).");
  m.def("_ms_deform_attn_block_backward", &block_backward, "d_out"_a, "query"_a, "reference_points"_a,
        "input_flatten"_a, "spatial_shapes"_a, "level_start_index"_a, "padding_mask"_a,
        "params"_a, "cache"_a, "opts"_a, "reference"_a,
        "MSDeformAttn backward -> (d_query, d_input_flatten, d_reference_points, grads dict).");
  m.def("_ms_deform_attn_block_init", &init, "opts"_a, "seed"_a,
        "Deformable DETR's initialisation of MSDeformAttn parameters -> params dict.");
}

}  // namespace attnkit::python
