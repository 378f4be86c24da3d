// Python bindings for the model tools: the sink profiler and streaming perplexity.
#include <pybind11/stl.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "array_views.hpp"
#include "attnkit/tools/sink_profile.hpp"
#include "attnkit/tools/stream_eval.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

py::array_t<double> doubles(const std::vector<double>& v, std::vector<py::ssize_t> shape) {
  py::array_t<double> a(shape);
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

// The tools validate their options with the CLI's flag names (--query-pos, --tokens, ...): called
// from Python, an error names the Python argument instead. `names` pairs each flag with it.
template <class F>
auto naming_arguments(std::initializer_list<std::pair<std::string_view, std::string_view>> names, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& [flag, arg] : names)
      for (size_t at = msg.find(flag); at != std::string::npos; at = msg.find(flag, at + arg.size()))
        msg.replace(at, flag.size(), arg);
    throw Error(msg);
  }
}

}  // namespace

void bind_tools(py::module_& m) {
  using namespace pybind11::literals;
  m.def(
      "_sink_profile",
      [](GptModel& g, const py::object& tokens, int64_t query_pos, int64_t windows, int64_t recent,
         int64_t gate_bins) {
        const auto ids = int32_vector(tokens, "tokens");
        SinkProfile p;
        {
          py::gil_scoped_release nogil;
          p = naming_arguments({{"--query-pos", "query_pos"}, {"--windows", "windows"}, {"--recent", "recent"},
                                {"--gate-bins", "gate_bins"}, {"--data", "tokens"}},
                               [&] {
                                 return sink_profile(g, ids, {.query_pos = query_pos, .windows = windows,
                                                              .recent = recent, .gate_bins = gate_bins});
                               });
        }
        const py::ssize_t L = p.layers, H = p.heads, n = p.query_pos + 1;
        py::dict d;
        d["mass"] = doubles(p.mass, {L, H, n});
        d["sink_share"] = doubles(p.sink_share, {L, H});
        d["gate_mean"] = doubles(p.gate_mean, {L, H});
        d["gate_hist"] = doubles(p.gate_hist, {L, H, py::ssize_t(p.gate_bins)});
        d["hidden_norm"] = doubles(p.hidden_norm, {L + 1, n});
        d["key_norm"] = doubles(p.key_norm, {L, py::ssize_t(p.kv_heads), n});
        return d;
      },
      "model"_a, "tokens"_a, "query_pos"_a, "windows"_a, "recent"_a, "gate_bins"_a);
  m.def(
      "_stream_eval",
      [](GptModel& g, const py::object& tokens, const std::string& policy, int64_t window,
         int64_t sink_tokens, int64_t count) {
        const auto ids = int32_vector(tokens, "tokens");
        StreamEvalResult r;
        const StreamEvalOptions o{.policy = parse_kv_policy(policy), .window = window,
                                  .sink_tokens = sink_tokens, .tokens = count};
        {
          py::gil_scoped_release nogil;
          r = naming_arguments({{"--tokens", "count"}, {"--window", "window"}, {"--sink-tokens", "sink_tokens"},
                                {"--policy", "policy"}},
                               [&] { return stream_eval(g, ids, o); });
        }
        py::dict d;
        d["nll"] = doubles(r.nll, {py::ssize_t(r.nll.size())});
        d["cache_positions"] = r.cache_positions;
        return d;
      },
      "model"_a, "tokens"_a, "policy"_a, "window"_a, "sink_tokens"_a, "count"_a);
}

}  // namespace attnkit::python
