// Python bindings for the image classifiers (CNN, ViT, deformable encoder): one class,
// attnkit.ImageModel, over the ImageClassifier interface. Parameters, gradients and buffers are
// returned as writable numpy views into the model (they keep the model alive).
#include <pybind11/stl.h>

#include "array_views.hpp"
#include "attnkit/core/error.hpp"
#include "attnkit/models/image_classifier.hpp"
#include "attnkit/models/model_registry.hpp"
#include "bindings.hpp"

namespace attnkit::python {
namespace {

// A writable numpy view of the tensor `name` of the ImageClassifier `self` in its parameters
// ("parameter"), gradients ("gradient") or buffers ("buffer"), kept alive by self.
py::array view_of(const py::object& self, const std::string& name, const std::string& what) {
  auto& c = self.cast<ImageClassifier&>();
  const bool buffer = what == "buffer";
  float* base = buffer ? c.buffers().data() : what == "gradient" ? c.gradients().data() : c.parameters().data();
  const ParameterInfo* found = nullptr;
  for (const auto& q : buffer ? c.buffer_info() : c.parameter_info())
    if (q.name == name) found = &q;
  if (!found) fail(what, ": no tensor named '", name, "'");
  const ParameterInfo& p = *found;
  std::vector<py::ssize_t> shape(p.shape.begin(), p.shape.end()), strides(p.shape.size());
  py::ssize_t s = sizeof(float);
  for (size_t d = p.shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= py::ssize_t(p.shape[d]);
  }
  return py::array_t<float>(shape, strides, base + p.offset, self);
}

std::vector<std::string> names(const std::vector<ParameterInfo>& info) {
  std::vector<std::string> out;
  for (const auto& p : info) out.push_back(p.name);
  return out;
}

}  // namespace

void bind_image_model(py::module_& m) {
  using namespace pybind11::literals;
  py::class_<ImageClassifier>(m, "ImageModel",
                              "An image classifier (model_type cnn, vit or deformable): NCHW float32 "
                              "images in, logits out, explicit forward/backward.")
      .def(py::init([](const std::string& config_json) { return make_image_classifier(config_json); }),
           "config_json"_a, "A model with zero weights for config.json text (call init_random).")
      .def_static(
          "load",
          [](const std::string& dir) {
            require_model_kind(dir, ModelKind::kImage, "attnkit.ImageModel.load");
            return load_image_classifier(dir);
          },
          "dir"_a,
                  "Loads config.json + model.safetensors from a model directory.")
      .def("save", &ImageClassifier::save, "dir"_a, "Writes config.json + model.safetensors atomically.")
      .def(
          "init_random",
          [](ImageClassifier& c, const py::object& seed) { c.init_random(unsigned_arg(seed, "seed")); }, "seed"_a)
      .def_property_readonly("model_type", &ImageClassifier::model_type)
      .def_property_readonly("num_classes", &ImageClassifier::num_classes)
      .def_property_readonly("input_shape",
                             [](const ImageClassifier& c) {
                               const ImageShape s = c.input_shape();
                               return py::make_tuple(s.channels, s.height, s.width);
                             })
      .def_property_readonly("config_json", &ImageClassifier::config_json)
      .def_property_readonly("parameter_count", &ImageClassifier::parameter_count)
      .def("parameter_names", [](const ImageClassifier& c) { return names(c.parameter_info()); })
      .def("buffer_names", [](const ImageClassifier& c) { return names(c.buffer_info()); })
      .def("parameter", [](py::object self, const std::string& name) { return view_of(self, name, "parameter"); },
           "name"_a, "Writable view of a trainable tensor.")
      .def("gradient", [](py::object self, const std::string& name) { return view_of(self, name, "gradient"); },
           "name"_a, "Writable view of a tensor's gradient (accumulated by backward).")
      .def("buffer", [](py::object self, const std::string& name) { return view_of(self, name, "buffer"); },
           "name"_a, "Writable view of a non-trainable tensor (batch-norm running statistics).")
      .def(
          "set_training",
          [](ImageClassifier& c, bool training, const py::object& seed) {
            c.set_training(training, unsigned_arg(seed, "seed"));
          },
          "training"_a, "seed"_a = py::int_(0))
      .def("zero_grad", &ImageClassifier::zero_grad)
      .def(
          "forward",
          [](ImageClassifier& c, const py::handle& x) {
            py::array a = to_c_array<float>(as_float32(x, "x"), "x");
            check(a.ndim() == 4, "x: expected 4 dimensions [N, C, H, W], got ", a.ndim());
            // C-contiguous (numpy may give size-1 dimensions any stride): canonical strides.
            const ConstView4 v = ConstView4::contiguous(static_cast<const float*>(a.data()),
                                                        {a.shape(0), a.shape(1), a.shape(2), a.shape(3)});
            py::array_t<float> out;
            ConstView2 logits;
            {
              py::gil_scoped_release nogil;
              logits = c.forward(v);
            }
            out = new_array({py::ssize_t(logits.shape[0]), py::ssize_t(logits.shape[1])});
            for (int64_t i = 0; i < logits.shape[0]; ++i)
              std::copy_n(logits.ptr(i), logits.shape[1], out.mutable_data() + i * logits.shape[1]);
            return out;
          },
          "x"_a, "logits [N, K] of images x [N, C, H, W]; keeps activations for backward().")
      .def(
          "backward",
          [](ImageClassifier& c, const py::handle& d) {
            py::array a = to_c_array<float>(as_float32(d, "d_logits"), "d_logits");
            check(a.ndim() == 2, "d_logits: expected 2 dimensions [N, K], got ", a.ndim());
            const ConstView2 v = ConstView2::contiguous(static_cast<const float*>(a.data()), {a.shape(0), a.shape(1)});
            py::gil_scoped_release nogil;
            c.backward(v);
          },
          "d_logits"_a, "Adds the gradients of the last forward for d_logits [N, K].");
}

}  // namespace attnkit::python
