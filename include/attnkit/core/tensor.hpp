#pragma once
// Tensor views: a pointer, a shape and strides (in elements), outermost dimension first, as
// PyTorch prints them. Views never own memory; Tensor<T> below owns a contiguous buffer.
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "attnkit/core/error.hpp"

namespace attnkit {

template <class T, int R>
struct View {
  static_assert(R >= 1 && R <= 6, "views have rank 1..6");
  T* data = nullptr;
  std::array<int64_t, R> shape{};
  std::array<int64_t, R> stride{};  // elements, not bytes

  // A view of `shape` laid out row-major (last dimension contiguous) at `p`.
  static View contiguous(T* p, const std::array<int64_t, R>& shape) {
    View v{p, shape, {}};
    int64_t s = 1;
    for (int d = R - 1; d >= 0; --d) {
      v.stride[d] = s;
      s *= shape[d];
    }
    return v;
  }

  int64_t size(int d) const { return shape[d]; }
  int64_t numel() const {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
  bool empty() const { return data == nullptr; }
  // True when the last dimension is contiguous (stride 1) or has extent <= 1.
  bool inner_contiguous() const { return stride[R - 1] == 1 || shape[R - 1] <= 1; }

  template <class... I>
  T& operator()(I... idx) const {
    static_assert(sizeof...(I) == R, "index count must equal rank");
    const int64_t ix[R] = {int64_t(idx)...};
    int64_t off = 0;
    for (int d = 0; d < R; ++d) off += ix[d] * stride[d];
    return data[off];
  }

  // Pointer to the element at the given leading indices (remaining indices zero).
  template <class... I>
  T* ptr(I... idx) const {
    const int64_t ix[sizeof...(I)] = {int64_t(idx)...};
    int64_t off = 0;
    for (size_t d = 0; d < sizeof...(I); ++d) off += ix[d] * stride[d];
    return data + off;
  }

  operator View<const T, R>() const
    requires(!std::is_const_v<T>)
  {
    return {data, shape, stride};
  }
};

// Checks a view's extents and data: every extent >= 0, their product within int64 and a non-null
// data pointer when the product is > 0 (attnkit::Error naming `name` otherwise). Returns the
// element count.
template <class T, int R>
int64_t check_view_extents(const View<T, R>& v, const char* name) {
  int64_t n = 1;
  for (int d = 0; d < R; ++d) {
    check(v.shape[d] >= 0, name, ": negative extent ", v.shape[d], " in dim ", d);
    check(!__builtin_mul_overflow(n, v.shape[d], &n), name, ": element count overflows 64 bits");
  }
  check(v.data != nullptr || n == 0, name, ": null data");
  return n;
}

using View1 = View<float, 1>;
using View2 = View<float, 2>;
using View3 = View<float, 3>;
using View4 = View<float, 4>;
using ConstView1 = View<const float, 1>;
using ConstView2 = View<const float, 2>;
using ConstView3 = View<const float, 3>;
using ConstView4 = View<const float, 4>;

// An owning, contiguous, zero-initialised buffer with a shape; hands out views.
template <class T, int R>
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(const std::array<int64_t, R>& shape) : shape_(shape) {
    int64_t n = 1;
    for (auto s : shape) {
      check(s >= 0, "Tensor: negative extent ", s);
      n *= s;
    }
    data_.assign(size_t(n), T{});
  }
  // Gives the tensor `shape`, reusing its buffer: no allocation (and no page faults) while the
  // element count fits the capacity, which only grows (to exactly the new count, after freeing
  // the old buffer). Contents afterwards are unspecified; callers overwrite them. For buffers
  // whose size changes from call to call (tokens per batch) but whose values are rewritten.
  void resize(const std::array<int64_t, R>& shape) {
    int64_t n = 1;
    for (auto s : shape) {
      check(s >= 0, "Tensor: negative extent ", s);
      n *= s;
    }
    if (size_t(n) > data_.capacity()) {
      data_ = std::vector<T>();  // free first: peak memory is the new buffer, not old + new
      data_.reserve(size_t(n));
    }
    data_.resize(size_t(n));
    shape_ = shape;
  }
  View<T, R> view() { return View<T, R>::contiguous(data_.data(), shape_); }
  View<const T, R> view() const { return View<const T, R>::contiguous(data_.data(), shape_); }
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  int64_t numel() const { return int64_t(data_.size()); }
  const std::array<int64_t, R>& shape() const { return shape_; }
  std::vector<T>& storage() { return data_; }

 private:
  std::array<int64_t, R> shape_{};
  std::vector<T> data_;
};

}  // namespace attnkit
