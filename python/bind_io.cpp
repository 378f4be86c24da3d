// Python bindings for safetensors I/O (numpy in, numpy out):
//   load_safetensors(path) -> dict[str, numpy.ndarray]       (copies out of the mapped file)
//   load_safetensors_metadata(path) -> dict[str, str]
//   save_safetensors(path, tensors: dict[str, array], metadata: dict[str, str] | None = None)
// Python equivalent: safetensors.numpy.load_file / save_file, except BF16 loads as float32
// (numpy has no bfloat16) and F8_E4M3 / F8_E5M2 load as their raw uint8 bytes.
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <utility>

#include "attnkit/core/error.hpp"
#include "attnkit/io/safetensors.hpp"
#include "bindings.hpp"

namespace py = pybind11;

namespace attnkit::python {
namespace {

// The safetensors dtypes numpy holds as they are, with numpy's type string (byte order, kind,
// item size in bytes).
constexpr std::pair<DType, const char*> kNumpyTypes[] = {
    {DType::f64, "<f8"}, {DType::f32, "<f4"}, {DType::f16, "<f2"}, {DType::i64, "<i8"},
    {DType::i32, "<i4"}, {DType::i16, "<i2"}, {DType::i8, "|i1"},  {DType::u64, "<u8"},
    {DType::u32, "<u4"}, {DType::u16, "<u2"}, {DType::u8, "|u1"},  {DType::boolean, "|b1"}};

// The numpy dtype a loaded tensor gets (little-endian; BF16 widened to float32, F8 kept as bytes).
const char* numpy_format(DType t) {
  if (t == DType::bf16) return "<f4";
  if (t == DType::f8_e4m3 || t == DType::f8_e5m2) return "|u1";
  for (const auto& [dtype, format] : kNumpyTypes)
    if (dtype == t) return format;
  fail("unhandled dtype");
}

// The safetensors dtype for a numpy (kind, itemsize), or nullopt if we do not store that type.
std::optional<DType> dtype_for_numpy(char kind, py::ssize_t size) {
  for (const auto& [dtype, format] : kNumpyTypes)
    if (format[1] == kind && format[2] - '0' == size) return dtype;
  return std::nullopt;
}

std::string fspath(const py::object& path) {
  return py::cast<std::string>(py::module_::import("os").attr("fspath")(path));
}

SafetensorsFile open_without_gil(const std::string& path) {
  py::gil_scoped_release release;  // mapping and validating need no Python objects
  return SafetensorsFile(path);
}

// A new C-contiguous numpy array holding a copy of the tensor [shape], converted as documented.
py::array to_numpy(const SafetensorsFile& f, const TensorInfo& info) {
  const std::vector<py::ssize_t> shape(info.shape.begin(), info.shape.end());
  py::array out(py::dtype(numpy_format(info.dtype)), shape);
  auto* dst = static_cast<std::byte*>(out.mutable_data());
  const std::span<const std::byte> src = f.bytes(info);
  const size_t n = size_t(info.numel());
  if (info.dtype == DType::bf16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src.data() + 2 * i, 2);
      const float v = bf16_to_f32(h);
      std::memcpy(dst + 4 * i, &v, 4);
    }
  } else if (info.dtype == DType::boolean) {
    for (size_t i = 0; i < n; ++i) dst[i] = std::byte(src[i] != std::byte{0});  // numpy bools are 0/1
  } else if (!src.empty()) {
    std::memcpy(dst, src.data(), src.size());
  }
  return out;
}

py::dict load_safetensors(const py::object& path) {
  const SafetensorsFile f = open_without_gil(fspath(path));
  py::dict out;
  for (const TensorInfo& info : f.tensors()) out[py::str(info.name)] = to_numpy(f, info);
  return out;
}

std::map<std::string, std::string> load_safetensors_metadata(const py::object& path) {
  return open_without_gil(fspath(path)).metadata();
}

std::map<std::string, std::string> metadata_from(const py::object& metadata) {
  std::map<std::string, std::string> out;
  if (metadata.is_none()) return out;
  if (!py::isinstance<py::dict>(metadata)) fail("save_safetensors: metadata must be a dict[str, str] or None");
  for (const auto& [k, v] : metadata.cast<py::dict>()) {
    if (!py::isinstance<py::str>(k) || !py::isinstance<py::str>(v))
      fail("save_safetensors: metadata must map str to str; got ", std::string(py::str(py::repr(k))),
           ": ", std::string(py::str(py::repr(v))));
    out.emplace(k.cast<std::string>(), v.cast<std::string>());
  }
  return out;
}

void save_safetensors_py(const py::object& path, const py::dict& tensors, const py::object& metadata) {
  const py::module_ np = py::module_::import("numpy");
  std::vector<py::array> keep_alive;  // contiguous little-endian copies (or the inputs themselves)
  std::vector<TensorToWrite> to_write;
  for (const auto& [key, value] : tensors) {
    if (!py::isinstance<py::str>(key))
      fail("save_safetensors: tensor names must be str, got ", std::string(py::str(py::repr(key))));
    const std::string name = key.cast<std::string>();
    const py::array a = np.attr("asarray")(value);
    const auto dtype = dtype_for_numpy(a.dtype().kind(), a.itemsize());
    if (!dtype)
      fail("save_safetensors: tensor \"", name, "\" has unsupported numpy dtype ",
           std::string(py::str(a.dtype())),
           "; supported: float64 float32 float16 int64 int32 int16 int8 uint64 uint32 uint16 uint8 bool");
    // order="C" copies non-contiguous input; an explicit '<' dtype byte-swaps big-endian input.
    const py::object target = np.attr("dtype")(numpy_format(*dtype));  // never BF16/F8 here
    py::array c = np.attr("asarray")(a, py::arg("dtype") = target, py::arg("order") = "C");
    std::vector<int64_t> shape(c.shape(), c.shape() + c.ndim());
    to_write.push_back({name, *dtype, std::move(shape),
                        {static_cast<const std::byte*>(c.data()), size_t(c.nbytes())}});
    keep_alive.push_back(std::move(c));
  }
  const std::map<std::string, std::string> meta = metadata_from(metadata);
  const std::string p = fspath(path);
  py::gil_scoped_release release;
  save_safetensors(p, to_write, meta);
}

}  // namespace

void bind_io(py::module_& m) {
  m.def("load_safetensors", &load_safetensors, py::arg("path"),
        "Reads a safetensors file into a dict name -> numpy array (copies, C-contiguous, file order).\n"
        "dtypes: F64->float64, F32->float32, F16->float16, BF16->float32 (converted exactly),\n"
        "I64/I32/I16/I8 and U64/U32/U16/U8 -> matching ints, BOOL->bool, F8_E4M3/F8_E5M2 -> uint8\n"
        "raw bytes. The file is fully validated; raises attnkit.Error (a ValueError) otherwise.");
  m.def("load_safetensors_metadata", &load_safetensors_metadata, py::arg("path"),
        "The '__metadata__' dict[str, str] of a safetensors file (empty if absent); validates the file.");
  m.def("save_safetensors", &save_safetensors_py, py::arg("path"), py::arg("tensors"),
        py::arg("metadata") = py::none(),
        "Writes dict name -> array as safetensors, atomically (temp file, fsync, rename).\n"
        "Arrays of any layout or byte order are made C-contiguous little-endian. Supported dtypes:\n"
        "float64 float32 float16 int64 int32 int16 int8 uint64 uint32 uint16 uint8 bool;\n"
        "others raise attnkit.Error (a ValueError). metadata: dict[str, str] or None.");
}

}  // namespace attnkit::python
