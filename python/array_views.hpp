#pragma once
// numpy ↔ attnkit views: float32 arrays whose last dimension is contiguous are viewed in place
// (strided slices of a fused QKV projection included); anything else is converted once.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/tensor.hpp"

namespace attnkit::python {

namespace py = pybind11;

// A float32 array usable as a view: the original when its layout allows, else a converted copy.
inline py::array as_float32(const py::handle& obj, const char* name) {
  py::array a = py::array::ensure(obj);
  if (!a) throw Error(std::string(name) + ": expected a numpy array");
  if (a.dtype().kind() != 'f' && a.dtype().kind() != 'i' && a.dtype().kind() != 'u')
    throw Error(std::string(name) + ": expected a float32 array, got dtype " +
                std::string(py::str(a.dtype())));
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
  return py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
}

// Read-only rank-R view of a float32 array prepared by as_float32; checks the rank.
template <int R>
View<const float, R> const_view(const py::array& a, const char* name) {
  check(a.ndim() == R, name, ": expected ", R, " dimensions, got ", a.ndim());
  View<const float, R> v;
  v.data = static_cast<const float*>(a.data());
  for (int d = 0; d < R; ++d) {
    v.shape[d] = a.shape(d);
    v.stride[d] = a.strides(d) / 4;
  }
  return v;
}

// A new zero-filled C-contiguous float32 array of `shape`.
inline py::array_t<float> new_array(const std::vector<py::ssize_t>& shape) {
  py::array_t<float> a(shape);
  std::fill_n(a.mutable_data(), a.size(), 0.0f);
  return a;
}

// Writable rank-R view of a C-contiguous float32 array.
template <int R>
View<float, R> mutable_view(py::array_t<float>& a) {
  View<float, R> v;
  v.data = a.mutable_data();
  for (int d = 0; d < R; ++d) {
    v.shape[d] = a.shape(d);
    v.stride[d] = a.strides(d) / 4;
  }
  return v;
}

// int32 vector from an optional 1-D integer array (None → empty).
inline std::vector<int32_t> int32_vector(const py::object& obj, const char* name) {
  if (obj.is_none()) return {};
  py::array a = py::array::ensure(obj);
  if (!a || (a.dtype().kind() != 'i' && a.dtype().kind() != 'u'))
    throw Error(std::string(name) + ": expected a 1-D integer array");
  check(a.ndim() == 1, name, ": expected 1 dimension, got ", a.ndim());
  auto c = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
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
  auto c = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
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
  auto c = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  return std::vector<float>(c.data(), c.data() + c.size());
}

}  // namespace attnkit::python
