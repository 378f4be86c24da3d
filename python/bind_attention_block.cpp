// Python bindings for the attention block (include/attnkit/nn/attention_block.hpp):
// _attention_block_forward / _attention_block_backward take the parameters as a dict keyed by
// the C++ field names (qkv_proj_weight, ..., None or absent = no such parameter), the options as
// a dict, and return new arrays: the cache as a dict (qkv, attn, lse, gate_pre, gate, gated,
// q_pre; None where the options need none), gradients as a dict with the parameters' keys
// (starting from zero, so they are the gradients themselves). python/attnkit/nn.py wraps them.
#include <deque>
#include <string>
#include <vector>

#include "array_views.hpp"
#include "attnkit/nn/attention_block.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

using namespace pybind11::literals;
using Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

const char* const kParamNames[] = {"qkv_proj_weight", "qkv_proj_bias", "o_proj_weight",
                                   "o_proj_bias",     "sinks",         "gate_proj_weight",
                                   "gate_proj_bias"};
const char* const kCacheNames[] = {"qkv", "attn", "lse", "gate_pre", "gate", "gated", "q_pre"};

template <class T>
T get(const py::dict& d, const char* key, T fallback) {
  return d.contains(key) && !d[key].is_none() ? d[key].cast<T>() : fallback;
}

AttentionBlockOptions options(const py::dict& d) {
  AttentionBlockOptions o;
  o.heads = get<int64_t>(d, "heads", 0);
  o.kv_heads = get<int64_t>(d, "kv_heads", 0);
  o.head_dim = get<int64_t>(d, "head_dim", 0);
  o.rope_theta = get<double>(d, "rope_theta", 10000.0);
  o.causal = get<bool>(d, "causal", true);
  o.window_left = get<int>(d, "window_left", -1);
  o.window_right = get<int>(d, "window_right", -1);
  o.scale = get<float>(d, "scale", 0.0f);
  o.gate_bias = get<bool>(d, "gate_bias", true);
  o.qkv_bias = get<bool>(d, "qkv_bias", false);
  o.o_bias = get<bool>(d, "o_bias", false);
  const auto sink = get<std::string>(d, "sink_logits", "none");
  const auto gate = get<std::string>(d, "gate", "none");
  const auto source = get<std::string>(d, "gate_source", "input");
  if (sink == "none") o.sink_logits = SinkLogits::kNone;
  else if (sink == "learned") o.sink_logits = SinkLogits::kLearned;
  else if (sink == "off_by_one") o.sink_logits = SinkLogits::kOffByOne;
  else fail("sink_logits: expected 'none', 'learned' or 'off_by_one', got '", sink, "'");
  if (gate == "none") o.gate = GateMode::kNone;
  else if (gate == "headwise") o.gate = GateMode::kHeadwise;
  else if (gate == "elementwise") o.gate = GateMode::kElementwise;
  else fail("gate: expected 'none', 'headwise' or 'elementwise', got '", gate, "'");
  if (source == "input") o.gate_source = GateSource::kInput;
  else if (source == "query") o.gate_source = GateSource::kQuery;
  else fail("gate_source: expected 'input' or 'query', got '", source, "'");
  return o;
}

// Keeps the converted arrays alive for the call (a deque: pointers stay valid as it grows).
struct Arrays {
  std::deque<Array> keep;
  Array* add(const py::object& obj, const char* name, int ndim) {
    if (obj.is_none()) return nullptr;
    keep.push_back(to_c_array<float>(as_float32(obj, name), name));
    check(keep.back().ndim() == ndim, name, ": expected ", ndim, " dimensions, got ",
          keep.back().ndim());
    return &keep.back();
  }
};

py::object item(const py::dict& d, const char* key) {
  return d.contains(key) ? py::object(d[key]) : py::object(py::none());
}

std::span<const float> kept_span(const Array* a) {
  return a ? std::span<const float>(a->data(), size_t(a->size())) : std::span<const float>{};
}
ConstView2 kept_cview(Array* a) { return a ? const_view<2>(*a, "array") : ConstView2{}; }
// The backward only reads the cache; views are mutable in type only.
View2 kept_mview(Array* a) {
  if (!a) return {};
  const ConstView2 c = const_view<2>(*a, "cache");
  return {const_cast<float*>(c.data), c.shape, c.stride};
}

AttentionBlockParams params(const py::dict& d, Arrays& keep) {
  AttentionBlockParams p;
  p.qkv_proj_weight = kept_cview(keep.add(item(d, "qkv_proj_weight"), "qkv_proj_weight", 2));
  p.qkv_proj_bias = kept_span(keep.add(item(d, "qkv_proj_bias"), "qkv_proj_bias", 1));
  p.o_proj_weight = kept_cview(keep.add(item(d, "o_proj_weight"), "o_proj_weight", 2));
  p.o_proj_bias = kept_span(keep.add(item(d, "o_proj_bias"), "o_proj_bias", 1));
  p.sinks = kept_span(keep.add(item(d, "sinks"), "sinks", 1));
  p.gate_proj_weight = kept_cview(keep.add(item(d, "gate_proj_weight"), "gate_proj_weight", 2));
  p.gate_proj_bias = kept_span(keep.add(item(d, "gate_proj_bias"), "gate_proj_bias", 1));
  return p;
}

std::vector<int64_t> positions(const py::object& obj, int64_t t) {
  if (obj.is_none()) {  // default: 0..T-1 (one sequence)
    std::vector<int64_t> p(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) p[size_t(i)] = i;
    return p;
  }
  py::array raw = to_array(obj, "positions");
  require_integer(raw, "positions");
  auto a = to_c_array<int64_t>(raw, "positions");
  check(a.ndim() == 1, "positions: expected a 1-D integer array");
  return std::vector<int64_t>(a.data(), a.data() + a.size());
}

py::array_t<float> zeros_or(bool present, std::vector<py::ssize_t> shape) {
  return present ? new_array(shape) : py::array_t<float>();
}

void bind(py::module_& m) {
  m.def(
      "_attention_block_forward",
      [](py::object x_obj, const py::dict& p_dict, py::object cu_obj, py::object pos_obj,
         const py::dict& o_dict, bool reference) {
        const AttentionBlockOptions o = options(o_dict);
        Arrays keep;
        Array* x = keep.add(x_obj, "x", 2);
        check(x != nullptr, "x: expected a [T, C] array, got None");
        const AttentionBlockParams p = params(p_dict, keep);
        const auto cu = int32_vector(cu_obj, "cu_seqlens");
        const int64_t t = x->shape(0), c = x->shape(1), hd = o.heads * o.head_dim;
        const auto pos = positions(pos_obj, t);
        check(o.heads >= 1 && o.head_dim >= 1, "heads, head_dim: expected >= 1, got ", o.heads,
              ", ", o.head_dim);
        const int64_t hg = o.gate_width();
        const bool q_pre = hg > 0 && o.gate_source == GateSource::kQuery && o.rope_theta > 0;
        auto out = new_array({t, c});
        py::array_t<float> arrays[] = {
            new_array({t, o.qkv_width()}), new_array({t, hd}), new_array({o.heads, t}),
            zeros_or(hg > 0, {t, hg}), zeros_or(hg > 0, {t, hg}), zeros_or(hg > 0, {t, hd}),
            zeros_or(q_pre, {t, hd})};
        View2 v[7];
        for (int i = 0; i < 7; ++i)  // absent entries are 1-D placeholders
          v[i] = arrays[i].ndim() == 2 ? mutable_view<2>(arrays[i]) : View2{};
        const AttentionBlockCache cache{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
        {
          py::gil_scoped_release nogil;
          (reference ? attention_block_forward_reference : attention_block_forward)(
              mutable_view<2>(out), cache, kept_cview(x), {cu, pos}, p, o);
        }
        py::dict cache_dict;
        for (int i = 0; i < 7; ++i)
          cache_dict[kCacheNames[i]] = arrays[i].ndim() == 2 ? py::object(arrays[i]) : py::none();
        return py::make_tuple(out, cache_dict);
      },
      "x"_a, "params"_a, "cu_seqlens"_a, "positions"_a, "opts"_a, "reference"_a = false,
      "Attention block forward: x [T, C] -> (out [T, C], cache dict).");
  m.def(
      "_attention_block_backward",
      [](py::object dy_obj, py::object x_obj, const py::dict& p_dict, const py::dict& c_dict,
         py::object cu_obj, py::object pos_obj, const py::dict& o_dict, bool reference) {
        const AttentionBlockOptions o = options(o_dict);
        Arrays keep;
        Array* x = keep.add(x_obj, "x", 2);
        Array* d_out = keep.add(dy_obj, "d_out", 2);
        check(x != nullptr && d_out != nullptr, "x, d_out: expected [T, C] arrays, got None");
        const AttentionBlockParams p = params(p_dict, keep);
        View2 v[7];
        for (int i = 0; i < 7; ++i)
          v[i] = kept_mview(keep.add(item(c_dict, kCacheNames[i]), kCacheNames[i], 2));
        const AttentionBlockCache cache{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
        const auto cu = int32_vector(cu_obj, "cu_seqlens");
        const int64_t t = x->shape(0), c = x->shape(1), hd = o.heads * o.head_dim;
        const auto pos = positions(pos_obj, t);
        const int64_t hg = o.gate_width();
        auto d_x = new_array({t, c});
        // Gradients like the parameters (absent parameters get none).
        py::dict grads;
        std::vector<py::array_t<float>> g(7);
        const ConstView2 w2[] = {p.qkv_proj_weight, p.o_proj_weight, p.gate_proj_weight};
        const std::span<const float> s1[] = {p.qkv_proj_bias, p.o_proj_bias, p.sinks,
                                             p.gate_proj_bias};
        const int mat_idx[] = {0, 2, 5}, vec_idx[] = {1, 3, 4, 6};
        for (int i = 0; i < 3; ++i)
          if (w2[i].data) g[size_t(mat_idx[i])] = new_array({w2[i].shape[0], w2[i].shape[1]});
        for (int i = 0; i < 4; ++i)
          if (!s1[i].empty()) g[size_t(vec_idx[i])] = new_array({py::ssize_t(s1[i].size())});
        auto vspan = [&](int i) {
          auto& a = g[size_t(i)];
          return a.size() > 0 ? std::span<float>(a.mutable_data(), size_t(a.size()))
                               : std::span<float>{};
        };
        auto vmat = [&](int i) {
          return g[size_t(i)].ndim() == 2 ? mutable_view<2>(g[size_t(i)]) : View2{};
        };
        const AttentionBlockGrads grads_view{vmat(0), vspan(1), vmat(2), vspan(3),
                                             vspan(4), vmat(5), vspan(6)};
        auto d_qkv = new_array({t, o.qkv_width()}), d_attn = new_array({t, hd});
        auto d_gate = zeros_or(hg > 0, {t, hg});
        auto d_sink = zeros_or(o.sink_logits != SinkLogits::kNone, {1, o.heads});
        const AttentionBlockScratch scratch{
            mutable_view<2>(d_qkv), mutable_view<2>(d_attn),
            hg > 0 ? mutable_view<2>(d_gate) : View2{},
            o.sink_logits != SinkLogits::kNone ? mutable_view<2>(d_sink) : View2{}};
        {
          py::gil_scoped_release nogil;
          (reference ? attention_block_backward_reference : attention_block_backward)(
              mutable_view<2>(d_x), grads_view, scratch, kept_cview(d_out), kept_cview(x), cache, {cu, pos},
              p, o);
        }
        for (int i = 0; i < 7; ++i)
          grads[kParamNames[i]] = g[size_t(i)].size() > 0 || g[size_t(i)].ndim() == 2
                                      ? py::object(g[size_t(i)]) : py::none();
        return py::make_tuple(d_x, grads);
      },
      "d_out"_a, "x"_a, "params"_a, "cache"_a, "cu_seqlens"_a, "positions"_a, "opts"_a,
      "reference"_a = false,
      "Attention block backward -> (d_x [T, C], gradients dict keyed like params).");
}

}  // namespace

void bind_attention_block(py::module_& m) { bind(m); }

}  // namespace attnkit::python
