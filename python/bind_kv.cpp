// Python bindings for the KV cache: kv_plan (the memory planner), kv_presets.
#include <Python.h>

#include <cmath>
#include <string>

#include "attnkit/core/error.hpp"
#include "attnkit/kv/kv_plan.hpp"
#include "bindings.hpp"

namespace py = pybind11;

namespace attnkit::python {
namespace {

// A Python integer (int or numpy integer, not bool) as int64; attnkit::Error naming `name` otherwise.
int64_t to_int64(py::handle h, const char* name, bool allow_whole_float = false) {
  if (allow_whole_float && PyFloat_Check(h.ptr())) {
    const double d = PyFloat_AsDouble(h.ptr());
    check(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18, "kv_plan: ", name,
          " must be a whole number, got ", d);
    return int64_t(d);
  }
  check(!PyBool_Check(h.ptr()) && PyIndex_Check(h.ptr()), "kv_plan: ", name, " must be an integer, got ",
        std::string(py::str(py::type::of(h).attr("__name__"))));
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  check(overflow == 0, "kv_plan: ", name, " does not fit in 64 bits: ", std::string(py::str(h)));
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

std::optional<int64_t> to_opt_int64(py::handle h, const char* name) {
  if (h.is_none()) return std::nullopt;
  return to_int64(h, name);
}

py::dict to_dict(const std::vector<KVPlanField>& fields) {
  py::dict d;
  for (const KVPlanField& f : fields) {
    std::visit([&](const auto& v) { d[py::str(std::string(f.key))] = v; }, f.value);
  }
  return d;
}

py::dict kv_plan_py(py::object layers, py::object heads, py::object kv_heads, py::object head_dim,
                    const std::string& dtype, py::object context, py::object batch, double bandwidth,
                    py::object tp, py::object memory, py::object preset) {
  KVPlanRequest req;
  if (!preset.is_none()) {
    check(py::isinstance<py::str>(preset), "kv_plan: preset must be a str or None");
    req.preset = preset.cast<std::string>();
    check(!req.preset.empty(), "kv_plan: preset must not be empty (use None for no preset)");
  }
  req.layers = to_opt_int64(layers, "layers");
  req.heads = to_opt_int64(heads, "heads");
  req.kv_heads = to_opt_int64(kv_heads, "kv_heads");
  req.head_dim = to_opt_int64(head_dim, "head_dim");
  req.context = to_opt_int64(context, "context");
  req.dtype = parse_kv_dtype(dtype);
  check(req.dtype.has_value(), "kv_plan: dtype must be one of f32, f16, bf16, int8, fp8, got '", dtype, "'");
  req.batch = to_int64(batch, "batch");
  req.tp = to_int64(tp, "tp");
  req.bandwidth = bandwidth;
  req.memory = to_int64(memory, "memory", /*allow_whole_float=*/true);

  const KVPlanInputs in = resolve(req);
  const KVPlanVariants v = kv_plan_variants(in.shape, in.options);
  py::dict d;
  d["preset"] = req.preset.empty() ? py::object(py::none()) : py::object(py::str(req.preset));
  for (auto item : to_dict(kv_plan_fields(in))) d[item.first] = item.second;
  for (auto item : to_dict(kv_plan_fields(v.given))) d[item.first] = item.second;
  d["mha"] = to_dict(kv_plan_fields(v.mha));
  d["mqa"] = to_dict(kv_plan_fields(v.mqa));
  return d;
}

}  // namespace

void bind_kv(py::module_& m) {
  m.def("kv_plan", &kv_plan_py, py::kw_only(), py::arg("layers") = py::none(),
        py::arg("heads") = py::none(), py::arg("kv_heads") = py::none(), py::arg("head_dim") = py::none(),
        py::arg("dtype") = "f16", py::arg("context") = py::none(), py::arg("batch") = 1,
        py::arg("bandwidth") = kDefaultKVBandwidth, py::arg("tp") = 1, py::arg("memory") = 80e9,
        py::arg("preset") = py::none(),
        R"(KV-cache memory plan: M_tok = 2*L*Hkv*D*b bytes per token (b = bytes per element; int8
adds a float32 scale per token per KV head for K and V, 2*L*Hkv*4 bytes; fp8 has none).

Explicit arguments override the preset's; kv_heads defaults to heads (MHA); dtype to f16 (the
presets are f16: pass dtype to change it). bandwidth is bytes/s per device (default 3.35e12,
H100 SXM HBM3); memory is the KV budget per device in bytes (default 80e9, one 80 GB GPU).

Returns a dict with the same keys as `attnkit kv-plan --json`: preset, layers, heads, kv_heads,
head_dim, dtype, bytes_per_element, context, batch, tp, bandwidth, memory; for the given shape
bytes_per_token, scale_bytes_per_token, bytes_per_sequence, bytes_batch, kv_heads_per_shard,
replication, shard_bytes_per_token, shard_bytes_per_sequence, shard_bytes_batch,
total_bytes_batch, read_seconds, sequences_in_budget; and "mha", "mqa" dicts with the same row
keys for Hkv = H and Hkv = 1. Byte counts are exact ints. Raises attnkit.Error (a ValueError)
naming the argument for impossible shapes or 64-bit overflow.)");
  m.def("kv_presets", [] {
        py::dict d;
        for (const KVPreset& p : kv_presets()) {
          py::dict e;
          e["layers"] = p.shape.layers;
          e["heads"] = p.shape.heads;
          e["kv_heads"] = p.shape.kv_heads;
          e["head_dim"] = p.shape.head_dim;
          e["dtype"] = std::string(kv_dtype_name(p.shape.dtype));
          e["context"] = p.context;
          e["note"] = std::string(p.note);
          d[py::str(std::string(p.name))] = e;
        }
        return d;
      },
      "The kv_plan presets: {name: {layers, heads, kv_heads, head_dim, dtype, context, note}}.");
}

}  // namespace attnkit::python
