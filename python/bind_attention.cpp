// Python bindings for attention: packed [T, H, D] float32 arrays in, numpy arrays out. The
// [B, L, H, D] layout and keyword defaults are handled in python/attnkit/__init__.py.
#include <cmath>
#include <initializer_list>
#include <limits>

#include "array_views.hpp"
#include "attnkit/attention/attention_reference.hpp"
#include "attnkit/attention/flash_attention.hpp"
#include "attnkit/core/rng.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

// Everything one attention call needs, kept alive for the duration of the call.
struct CallState {
  py::array q, k, v;
  std::vector<int32_t> cu_q, cu_k;
  std::vector<float> sinks, slopes;
  AttentionOptions opts;
  AttentionArgs args;
};

CallState make_call(const py::object& q, const py::object& k, const py::object& v,
                    const py::object& cu_q, const py::object& cu_k, const py::object& sinks,
                    const py::object& slopes, int window_left, int window_right, float scale,
                    float softcap, float dropout_p, uint64_t seed) {
  CallState s;
  s.q = as_float32(q, "q");
  s.k = as_float32(k, "k");
  s.v = as_float32(v, "v");
  s.cu_q = int32_vector(cu_q, "cu_seqlens_q");
  s.cu_k = int32_vector(cu_k, "cu_seqlens_k");
  s.sinks = float_vector(sinks, "sink_logits");
  s.opts = {.scale = scale, .window_left = window_left, .window_right = window_right,
            .softcap = softcap, .dropout_p = dropout_p, .seed = seed};
  s.args.q = const_view<3>(s.q, "q");
  s.slopes = slopes_vector(slopes, s.args.q.shape[1],
                           s.cu_q.empty() ? 1 : int64_t(s.cu_q.size()) - 1);
  s.args.k = const_view<3>(s.k, "k");
  s.args.v = const_view<3>(s.v, "v");
  s.args.cu_seqlens_q = s.cu_q;
  s.args.cu_seqlens_k = s.cu_k;
  s.args.sink_logits = s.sinks;
  s.args.alibi_slopes = s.slopes;
  return s;
}

using ForwardFn = void (*)(const AttentionOptions&, const AttentionArgs&);
using BackwardFn = void (*)(const AttentionOptions&, const AttentionArgs&, const AttentionGrads&);

py::tuple run_forward(ForwardFn fn, CallState s) {
  auto out = new_array({s.args.q.shape[0], s.args.q.shape[1], s.args.q.shape[2]});
  auto lse = new_array({s.args.q.shape[1], s.args.q.shape[0]});
  s.args.out = mutable_view<3>(out);
  s.args.lse = mutable_view<2>(lse);
  {
    py::gil_scoped_release nogil;
    fn(s.opts, s.args);
  }
  return py::make_tuple(out, lse);
}

py::tuple run_backward(BackwardFn fn, CallState s, const py::object& dout_obj,
                       const py::object& out_obj, const py::object& lse_obj) {
  py::array dout = as_float32(dout_obj, "dout");
  const auto& q = s.args.q;
  auto d_q = new_array({q.shape[0], q.shape[1], q.shape[2]});
  auto d_k = new_array({s.args.k.shape[0], s.args.k.shape[1], s.args.k.shape[2]});
  auto d_v = new_array({s.args.v.shape[0], s.args.v.shape[1], s.args.v.shape[2]});
  auto d_sink = new_array({py::ssize_t(s.sinks.size())});
  // out and lse are inputs of the flash backward; the reference recomputes them.
  py::array out_arr, lse_arr;
  if (!out_obj.is_none()) {
    out_arr = to_c_array<float>(as_float32(out_obj, "out"), "out");
    const auto ov = const_view<3>(out_arr, "out");
    s.args.out = {const_cast<float*>(ov.data), ov.shape, ov.stride};
  } else {
    s.args.out = {nullptr, q.shape, {0, 0, 1}};
  }
  if (!lse_obj.is_none()) {
    lse_arr = to_c_array<float>(as_float32(lse_obj, "lse"), "lse");
    const auto lv = const_view<2>(lse_arr, "lse");
    s.args.lse = {const_cast<float*>(lv.data), lv.shape, lv.stride};
  }
  AttentionGrads g{.d_out = const_view<3>(dout, "dout"),
                   .d_q = mutable_view<3>(d_q),
                   .d_k = mutable_view<3>(d_k),
                   .d_v = mutable_view<3>(d_v),
                   .d_sink = std::span<float>(d_sink.mutable_data(), s.sinks.size())};
  {
    py::gil_scoped_release nogil;
    fn(s.opts, s.args, g);
  }
  py::object ds = s.sinks.empty() ? py::object(py::none()) : py::object(d_sink);
  return py::make_tuple(d_q, d_k, d_v, ds);
}

}  // namespace

void bind_attention(py::module_& m) {
  using namespace pybind11::literals;
  struct Forward {  // the reference and the flash forward take the same arguments
    const char* name;
    ForwardFn fn;
    const char* doc;
  };
  for (const Forward& f :
       {Forward{"_attention_reference", &attention_reference,
                "Reference attention on packed [T, H, D] float32 arrays -> (out [T, H, D], lse [H, T])."},
        Forward{"_flash_attention", &flash_attention,
                "Flash attention on packed [T, H, D] float32 arrays -> (out [T, H, D], lse [H, T])."}})
    m.def(
        f.name,
        [fn = f.fn](py::object q, py::object k, py::object v, py::object cu_q, py::object cu_k,
                    py::object sinks, py::object slopes, int wl, int wr, float scale,
                    float softcap, float dropout_p, uint64_t seed) {
          return run_forward(fn, make_call(q, k, v, cu_q, cu_k, sinks, slopes, wl, wr, scale,
                                           softcap, dropout_p, seed));
        },
        "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a, "sink_logits"_a,
        "alibi_slopes"_a, "window_left"_a, "window_right"_a, "scale"_a, "softcap"_a,
        "dropout_p"_a, "seed"_a, f.doc);
  m.def(
      "_attention_reference_backward",
      [](py::object dout, py::object q, py::object k, py::object v, py::object cu_q,
         py::object cu_k, py::object sinks, py::object slopes, int wl, int wr, float scale,
         float softcap, float dropout_p, uint64_t seed) {
        return run_backward(&attention_reference_backward,
                            make_call(q, k, v, cu_q, cu_k, sinks, slopes, wl, wr, scale, softcap,
                                      dropout_p, seed),
                            dout, py::none(), py::none());
      },
      "dout"_a, "q"_a, "k"_a, "v"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a, "sink_logits"_a,
      "alibi_slopes"_a, "window_left"_a, "window_right"_a, "scale"_a, "softcap"_a, "dropout_p"_a,
      "seed"_a,
      "Gradients of reference attention on packed arrays -> (dq, dk, dv, dsink or None).");
  m.def(
      "dropout_keep_mask",
      [](const py::object& seed_obj, float p, int64_t seq, int64_t head, int64_t lq, int64_t lk) {
        const uint64_t seed = unsigned_arg(seed_obj, "seed");
        check(p >= 0 && p < 1, "p: must be in [0, 1), got ", p);
        check(lq >= 0 && lk >= 0 && seq >= 0 && head >= 0, "seq, head, lq, lk: must be >= 0");
        py::array_t<bool> keep({lq, lk});
        bool* out = keep.mutable_data();
        for (int64_t i = 0; i < lq; ++i)
          for (int64_t j = 0; j < lk; ++j)
            out[i * lk + j] = dropout_keep(seed, p, uint32_t(seq), uint32_t(head), uint32_t(i),
                                           uint32_t(j));
        return keep;
      },
      "seed"_a, "p"_a, "seq"_a, "head"_a, "lq"_a, "lk"_a,
      "Dropout keep mask [lq, lk] (bool) that attention uses for (seed, sequence, head).");
  m.def(
      "_flash_attention_backward",
      [](py::object dout, py::object q, py::object k, py::object v, py::object out,
         py::object lse, py::object cu_q, py::object cu_k, py::object sinks, py::object slopes,
         int wl, int wr, float scale, float softcap, float dropout_p, uint64_t seed) {
        return run_backward(&flash_attention_backward,
                            make_call(q, k, v, cu_q, cu_k, sinks, slopes, wl, wr, scale, softcap,
                                      dropout_p, seed),
                            dout, out, lse);
      },
      "dout"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a,
      "sink_logits"_a, "alibi_slopes"_a, "window_left"_a, "window_right"_a, "scale"_a, "softcap"_a,
      "dropout_p"_a, "seed"_a,
      "Gradients of flash attention from its out and lse -> (dq, dk, dv, dsink or None).");
}

}  // namespace attnkit::python
