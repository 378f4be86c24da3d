// Python bindings for the KV cache and decode attention (wrapped by python/attnkit/__init__.py).
#include <pybind11/stl.h>

#include "array_views.hpp"
#include "attnkit/attention/decode.hpp"
#include "attnkit/kv/kv_cache.hpp"
#include "bindings.hpp"

namespace attnkit::python {

void bind_kv_cache(py::module_& m) {
  using namespace pybind11::literals;
  py::class_<KVCache>(m, "_KVCache")
      .def(py::init([](int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t capacity,
                       const std::string& dtype, const std::string& policy, int64_t window,
                       int64_t sink_tokens, int64_t block_size, int64_t num_blocks,
                       int64_t max_sequences) {
             return std::make_unique<KVCache>(KVCacheConfig{
                 .layers = layers, .kv_heads = kv_heads, .head_dim = head_dim,
                 .capacity = capacity, .dtype = parse_kv_storage_dtype(dtype, "dtype"), .policy = parse_kv_policy(policy),
                 .window = window, .sink_tokens = sink_tokens, .block_size = block_size,
                 .num_blocks = num_blocks, .max_sequences = max_sequences});
           }),
           "layers"_a, "kv_heads"_a, "head_dim"_a, "capacity"_a, "dtype"_a, "policy"_a,
           "window"_a, "sink_tokens"_a, "block_size"_a, "num_blocks"_a, "max_sequences"_a)
      .def("add_sequence", &KVCache::add_sequence, "Claims a free sequence id.")
      .def("free_sequence", &KVCache::free_sequence, "seq"_a, "Releases a sequence (and its blocks).")
      .def("active", &KVCache::active, "seq"_a)
      .def(
          "append",
          [](KVCache& c, const py::object& k, const py::object& v, int64_t layer, int64_t seq) {
            py::array ka = as_float32(k, "k"), va = as_float32(v, "v");
            c.append(seq, layer, const_view<3>(ka, "k"), const_view<3>(va, "v"));
          },
          "k"_a, "v"_a, "layer"_a, "seq"_a,
          "Appends k, v [n, Hkv, D] float32 to one layer of a sequence.")
      .def("length", &KVCache::length, "seq"_a, "layer"_a)
      .def("cached", &KVCache::cached, "seq"_a, "layer"_a)
      .def(
          "positions",
          [](const KVCache& c, int64_t seq, int64_t layer) {
            const auto p = c.positions(seq, layer);
            py::array_t<int64_t> out(py::ssize_t(p.size()));
            std::copy(p.begin(), p.end(), out.mutable_data());
            return out;
          },
          "seq"_a, "layer"_a)
      .def(
          "gather",
          [](const KVCache& c, int64_t seq, int64_t layer) {
            const int64_t n = c.cached(seq, layer), h = c.config().kv_heads, d = c.config().head_dim;
            auto k = new_array({n, h, d}), v = new_array({n, h, d});
            c.gather(seq, layer, mutable_view<3>(k), mutable_view<3>(v));
            return py::make_tuple(k, v);
          },
          "seq"_a, "layer"_a)
      .def_property_readonly("nbytes", &KVCache::nbytes)
      .def_property_readonly("bytes_per_token", &KVCache::bytes_per_token)
      .def_property_readonly("slots_per_sequence", &KVCache::slots_per_sequence)
      .def_property_readonly("free_blocks", &KVCache::free_blocks)
      .def_property_readonly("layers", [](const KVCache& c) { return c.config().layers; })
      .def_property_readonly("kv_heads", [](const KVCache& c) { return c.config().kv_heads; })
      .def_property_readonly("head_dim", [](const KVCache& c) { return c.config().head_dim; })
      .def_property_readonly("policy", [](const KVCache& c) { return kv_policy_name(c.config().policy); })
      .def_property_readonly("dtype", [](const KVCache& c) { return std::string(dtype_name(c.config().dtype)); })
      .def_property_readonly("num_blocks", [](const KVCache& c) { return c.config().num_blocks; });

  m.def("set_decode_page_order", &set_decode_page_order, "on"_a,
        "Whether decode_attention reads each 4 KiB page of the cache forward, one page phase at a "
        "time (True), or in address order (False); only the summation order changes. Default: on "
        "for Intel CPUs, off otherwise (ATTNKIT_DECODE_PAGE_ORDER=0/1 overrides it).");
  m.def("decode_page_order", &decode_page_order,
        "Whether decode_attention reads by page phase (set_decode_page_order).");
  m.def(
      "_decode_attention",
      [](const py::object& q_obj, const KVCache& cache, int64_t layer, std::vector<int64_t> seqs,
         py::object sinks_obj, py::object slopes_obj, int wl, int wr, float scale, float softcap,
         float rope_theta, bool reference) {
        py::array q = as_float32(q_obj, "q");
        const auto qv = const_view<3>(q, "q");
        const std::vector<float> sinks = float_vector(sinks_obj, "sink_logits");
        const std::vector<float> slopes = slopes_vector(slopes_obj, qv.shape[1], int64_t(seqs.size()));
        auto out = new_array({qv.shape[0], qv.shape[1], qv.shape[2]});
        auto lse = new_array({qv.shape[1], qv.shape[0]});
        const DecodeOptions o{.attention = {.scale = scale, .window_left = wl, .window_right = wr,
                                            .softcap = softcap},
                              .rope_theta = rope_theta};
        const DecodeArgs a{.q = qv, .seqs = seqs, .cache = &cache, .layer = layer,
                           .sink_logits = sinks, .alibi_slopes = slopes, .out = mutable_view<3>(out),
                           .lse = mutable_view<2>(lse)};
        {
          py::gil_scoped_release nogil;
          (reference ? decode_attention_reference : decode_attention)(o, a);
        }
        return py::make_tuple(out, lse);
      },
      "q"_a, "cache"_a, "layer"_a, "seqs"_a, "sink_logits"_a, "alibi_slopes"_a, "window_left"_a,
      "window_right"_a, "scale"_a, "softcap"_a, "rope_theta"_a, "reference"_a,
      "Decode attention of q [B·n, H, D] against the cache -> (out [B·n, H, D], lse [H, B·n]).");
}

}  // namespace attnkit::python
