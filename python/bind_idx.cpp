// Python bindings for IDX files (include/attnkit/io/idx.hpp):
//   load_idx(path) -> numpy array with the file's type (u8→uint8, i8, >i2→int16, >i4→int32,
//                     >f4→float32, >f8→float64, native byte order) and shape
//   load_fashion_mnist(data_dir, split) -> (images uint8 [N, rows, cols], labels uint8 [N])
// Python equivalent: numpy.frombuffer(gzip.open(path).read(), dtype, offset=4 + 4·rank).
#include <pybind11/numpy.h>

#include <cstring>

#include "attnkit/core/error.hpp"
#include "attnkit/io/idx.hpp"
#include "bindings.hpp"

namespace py = pybind11;

namespace attnkit::python {
namespace {

py::dtype numpy_dtype(IdxType t) {
  switch (t) {
    case IdxType::u8: return py::dtype::of<uint8_t>();
    case IdxType::i8: return py::dtype::of<int8_t>();
    case IdxType::i16: return py::dtype::of<int16_t>();
    case IdxType::i32: return py::dtype::of<int32_t>();
    case IdxType::f32: return py::dtype::of<float>();
    case IdxType::f64: return py::dtype::of<double>();
  }
  fail("unknown IDX type");
}

py::array load_idx(const py::object& path_obj) {
  const auto path = py::cast<std::string>(py::module_::import("os").attr("fspath")(path_obj));
  IdxArray a;
  {
    py::gil_scoped_release nogil;
    a = read_idx(path);
  }
  std::vector<py::ssize_t> shape(a.shape.begin(), a.shape.end());
  py::array out(numpy_dtype(a.type), shape);
  if (!a.data.empty()) std::memcpy(out.mutable_data(), a.data.data(), a.data.size());
  return out;
}

py::tuple load_fashion_mnist_py(const py::object& dir_obj, const std::string& split) {
  const auto dir = py::cast<std::string>(py::module_::import("os").attr("fspath")(dir_obj));
  const DatasetSplit s = parse_dataset_split(split);
  ImageDataset ds;
  {
    py::gil_scoped_release nogil;
    ds = load_fashion_mnist(dir, s);
  }
  py::array_t<uint8_t> images({ds.count, ds.rows, ds.cols}), labels({ds.count});
  if (!ds.images.empty()) std::memcpy(images.mutable_data(), ds.images.data(), ds.images.size());
  if (!ds.labels.empty()) std::memcpy(labels.mutable_data(), ds.labels.data(), ds.labels.size());
  return py::make_tuple(images, labels);
}

}  // namespace

void bind_idx(py::module_& m) {
  m.def("load_idx", &load_idx, py::arg("path"),
        "Reads an IDX file (gzip-compressed or plain) into a numpy array of its type and shape.\n"
        "Fully validated; raises attnkit.Error (a ValueError) naming the file otherwise.");
  m.def("load_fashion_mnist", &load_fashion_mnist_py, py::arg("data_dir") = kFashionMnistDir,
        py::arg("split") = "train",
        "(images uint8 [N, rows, cols], labels uint8 [N]) of an MNIST-style directory; split is\n"
        "'train' or 'test'. Default directory: Debian's dataset-fashion-mnist.");
}

}  // namespace attnkit::python
