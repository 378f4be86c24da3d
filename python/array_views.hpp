#pragma once
// numpy ↔ attnkit views: float32 arrays whose last dimension is contiguous are viewed in place
// (strided slices of a fused QKV projection included); other floating arrays are converted once.
// Every conversion names its argument when it fails: TypeError (wrong kind of input),
// MemoryError (no memory for the copy), attnkit.Error (a ValueError) otherwise.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/tensor.hpp"

namespace attnkit::python {

namespace py = pybind11;

// Re-raises the pending Python error of a failed conversion of argument `name` with the name in
// front: MemoryError stays MemoryError (no memory for a copy), TypeError stays TypeError, anything
// else becomes attnkit.Error (a ValueError).
[[noreturn]] inline void raise_conversion_error(py::error_already_set& e, const char* name) {
  const std::string msg = std::string(name) + ": " + std::string(py::str(e.value()));
  if (e.matches(PyExc_MemoryError)) {
    PyErr_SetString(PyExc_MemoryError, msg.c_str());
    throw py::error_already_set();
  }
  if (e.matches(PyExc_TypeError)) throw py::type_error(msg);
  throw Error(msg);
}

// obj as a numpy array (converted by numpy's rules if it is not one). Never returns a null array:
// a failed conversion raises as raise_conversion_error says.
inline py::array to_array(const py::handle& obj, const char* name) {
  try {
    return py::array(py::reinterpret_borrow<py::object>(obj));
  } catch (py::error_already_set& e) {
    raise_conversion_error(e, name);
  }
}

// obj as a C-contiguous array of T: itself when it already is one, else a converted copy. Never
// returns a null array (see to_array).
template <class T>
py::array_t<T, py::array::c_style | py::array::forcecast> to_c_array(const py::handle& obj, const char* name) {
  try {
    return py::array_t<T, py::array::c_style | py::array::forcecast>(py::reinterpret_borrow<py::object>(obj));
  } catch (py::error_already_set& e) {
    raise_conversion_error(e, name);
  }
}

// Raises TypeError naming `name` unless `a` holds floating-point numbers (float16/32/64 are
// accepted; integers, booleans, strings and objects are not converted silently).
inline void require_floating(const py::array& a, const char* name) {
  if (a.dtype().kind() != 'f')
    throw py::type_error(std::string(name) + ": expected a floating-point array (float32; float64 and float16 "
                         "are converted), got dtype " + std::string(py::str(a.dtype())));
}

// A float32 array usable as a view: the original when its layout allows, else a converted copy.
// Raises TypeError for non-floating input and MemoryError if the copy cannot be allocated.
inline py::array as_float32(const py::handle& obj, const char* name) {
  py::array a = to_array(obj, name);
  require_floating(a, name);
  const bool ok = a.dtype().is(py::dtype::of<float>()) && a.ndim() >= 1 &&
                  (a.shape(a.ndim() - 1) <= 1 || a.strides(a.ndim() - 1) == 4);
  // In-place views only for row-major-like layouts: positive strides, each covering the extent
  // of the dimensions inside it (reversed, broadcast or overlapping arrays are copied, since
  // BLAS needs rows at a stride no smaller than their length).
  bool plain = true;
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    plain = plain && a.strides(d) % 4 == 0 && (a.shape(d) <= 1 || a.strides(d) > 0);
    if (d + 1 < a.ndim() && a.shape(d) > 1)
      plain = plain && a.strides(d) >= a.strides(d + 1) * std::max<py::ssize_t>(a.shape(d + 1), 1);
  }
  if (ok && plain) return a;
  return to_c_array<float>(a, name);
}

// A seed-like argument as an unsigned integer of `bits` bits: TypeError unless an integer (bools
// refused), ValueError (attnkit.Error) if negative or too large. Never wraps.
inline uint64_t unsigned_arg(const py::handle& obj, const char* name, int bits = 64) {
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr()))
    throw py::type_error(std::string(name) + ": expected a non-negative integer, got " +
                         std::string(py::str(obj.get_type().attr("__name__"))));
  const py::int_ v = py::reinterpret_steal<py::int_>(PyNumber_Index(obj.ptr()));
  if (!v) throw py::error_already_set();
  const bool negative = v < py::int_(0);
  const bool too_big = !negative && py::int_(v.attr("bit_length")()).cast<int>() > bits;
  if (negative || too_big)
    throw Error(std::string(name) + ": must be an integer in [0, 2**" + std::to_string(bits) + " - 1], got " +
                std::string(py::str(static_cast<const py::handle&>(v))));
  return v.cast<uint64_t>();
}

// Read-only rank-R view of a float32 array prepared by as_float32; checks the rank.
// numpy may give an empty array any strides; its view gets contiguous ones (nothing is read).
template <class V>
void set_strides(V& v, const py::array& a) {
  int64_t inner = 1;
  for (int d = int(v.shape.size()) - 1; d >= 0; --d) {
    v.shape[size_t(d)] = a.shape(d);
    v.stride[size_t(d)] = a.size() == 0 ? inner : a.strides(d) / 4;
    inner *= std::max<int64_t>(a.shape(d), 1);
  }
}

template <int R>
View<const float, R> const_view(const py::array& a, const char* name) {
  check(a.ndim() == R, name, ": expected ", R, " dimensions, got ", a.ndim());
  View<const float, R> v;
  v.data = static_cast<const float*>(a.data());
  set_strides(v, a);
  return v;
}

// A new zero-filled C-contiguous float32 array of `shape`.
inline py::array_t<float> new_array(const std::vector<py::ssize_t>& shape) {
  py::array_t<float> a(shape);
  // memset, not a fill loop: the bindings build at -O1, where a loop is not vectorised (it took
  // a tenth of a ViT-sized flash_attention call from Python).
  std::memset(a.mutable_data(), 0, sizeof(float) * size_t(a.size()));
  return a;
}

// The elements of a C-contiguous float32 array, writable.
inline std::span<float> span_of(py::array_t<float>& a) { return {a.mutable_data(), size_t(a.size())}; }

// v where present, else None (an optional output).
inline py::object maybe(bool present, const py::object& v) { return present ? v : py::none(); }

// Writable rank-R view of a C-contiguous float32 array.
template <int R>
View<float, R> mutable_view(py::array_t<float>& a) {
  View<float, R> v;
  v.data = a.mutable_data();
  set_strides(v, a);
  return v;
}

// Raises TypeError naming `name` unless `a` holds integers.
inline void require_integer(const py::array& a, const char* name) {
  if (a.dtype().kind() != 'i' && a.dtype().kind() != 'u')
    throw py::type_error(std::string(name) + ": expected an integer array, got dtype " + std::string(py::str(a.dtype())));
}

// int32 vector from an optional 1-D integer array (None → empty).
inline std::vector<int32_t> int32_vector(const py::object& obj, const char* name) {
  if (obj.is_none()) return {};
  py::array a = to_array(obj, name);
  require_integer(a, name);
  check(a.ndim() == 1, name, ": expected 1 dimension, got ", a.ndim());
  auto c = to_c_array<int64_t>(a, name);
  std::vector<int32_t> out(size_t(c.size()));
  for (py::ssize_t i = 0; i < c.size(); ++i) {
    const int64_t x = c.data()[i];
    check(x >= INT32_MIN && x <= INT32_MAX, name, ": entry ", i, " = ", x, " out of int32 range");
    out[size_t(i)] = int32_t(x);
  }
  return out;
}

// float vector from an optional 1-D array (None → empty).
inline std::vector<float> float_vector(const py::object& obj, const char* name) {
  if (obj.is_none()) return {};
  py::array a = as_float32(obj, name);
  check(a.ndim() == 1, name, ": expected 1 dimension, got ", a.ndim());
  auto c = to_c_array<float>(a, name);
  return std::vector<float>(c.data(), c.data() + c.size());
}

// ALiBi slopes from an optional [H] or [B, H] float array (None → empty), flattened row-major. A
// 2-D array must be [B, H] with B = `sequences` and H = `heads` (a transposed [H, B] would have
// the right size); the entry count of a 1-D array is checked by the kernels' validation.
inline std::vector<float> slopes_vector(const py::object& obj, int64_t heads, int64_t sequences) {
  if (obj.is_none()) return {};
  py::array a = as_float32(obj, "alibi_slopes");
  check(a.ndim() == 1 || a.ndim() == 2, "alibi_slopes: expected [H] or [B, H], got ", a.ndim(),
        " dimensions");
  if (a.ndim() == 2)
    check(a.shape(0) == sequences && a.shape(1) == heads, "alibi_slopes: expected [B, H] = [",
          sequences, ", ", heads, "], got [", a.shape(0), ", ", a.shape(1), "]");
  auto c = to_c_array<float>(a, "alibi_slopes");
  return std::vector<float>(c.data(), c.data() + c.size());
}

}  // namespace attnkit::python
