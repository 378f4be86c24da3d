#pragma once
// The part of the GPT and BERT bindings that is the same for both: construction from config.json
// text, load, save, init_random and config_json, and dicts of tensor copies by name.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "array_views.hpp"
#include "attnkit/models/parameter_model.hpp"

namespace attnkit::python {

// {Hugging Face name: a float32 copy [shape]} of every trainable tensor, read from `base`
// (m.parameters() or m.gradients(), which share the layout).
inline py::dict named_copies(const ParameterModel& m, const float* base) {
  py::dict out;
  for (const auto& p : m.parameter_info()) {
    py::array_t<float> a(std::vector<py::ssize_t>(p.shape.begin(), p.shape.end()));
    std::copy_n(base + p.offset, p.numel, a.mutable_data());
    out[py::str(p.name)] = a;
  }
  return out;
}

// Defines __init__(config_json), load(dir), save(dir), init_random(seed) and config_json() on
// `cls`; parse(text, source) and to_json(config) are the model's config functions.
template <class Model, class Parse, class ToJson>
py::class_<Model>& def_text_model_io(py::class_<Model>& cls, Parse parse, ToJson to_json) {
  using namespace pybind11::literals;
  return cls
      .def(py::init([parse](const std::string& config_json) {
             return std::make_unique<Model>(parse(config_json, "config.json"));
           }),
           "config_json"_a)
      .def_static("load", &Model::load, "dir"_a, "Loads config.json + model.safetensors.")
      .def("save", &Model::save, "dir"_a, "Writes config.json + model.safetensors atomically.")
      .def(
          "init_random", [](Model& m, const py::object& seed) { m.init_random(unsigned_arg(seed, "seed")); },
          "seed"_a)
      .def("config_json", [to_json](const Model& m) { return to_json(m.config()); });
}

}  // namespace attnkit::python
