// Private helpers shared by the nn layers (the block-parallel loops the models and trainers use
// too are public: attnkit/nn/parallel_blocks.hpp): argument checks with messages that name the function,
// the argument and expected vs actual shapes; row-parallel loops; a deterministic parallel GEMM;
// double-accumulating row reductions.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

#include "attnkit/core/error.hpp"
#include "attnkit/core/tensor.hpp"
#include "attnkit/nn/parallel_blocks.hpp"  // parallel_rows, parallel_fill, first_non_finite

namespace attnkit {
struct DropoutOptions;
struct RopeOptions;
}  // namespace attnkit

namespace attnkit::nn {

// Checks that v is [rows, cols] (dims names the letters, e.g. "[T, C]"), has data unless empty,
// contiguous rows and a row stride of at least cols.
template <class T>
void check_matrix(const View<T, 2>& v, const char* fn, const char* name, const char* dims,
                  int64_t rows, int64_t cols) {
  check(v.shape[0] == rows && v.shape[1] == cols, fn, ": ", name, ": expected shape ", dims, " = [",
        rows, ", ", cols, "], got [", v.shape[0], ", ", v.shape[1], "]");
  check(v.data != nullptr || rows * cols == 0, fn, ": ", name, ": null data for a non-empty view");
  check(v.stride[1] == 1 || cols <= 1, fn, ": ", name,
        ": last dimension must be contiguous (stride 1), got stride ", v.stride[1]);
  check(v.stride[0] >= cols || rows <= 1, fn, ": ", name, ": row stride ", v.stride[0],
        " is smaller than the row width ", cols);
}

// Checks that a span has n elements (or, if optional, 0 elements).
template <class T>
void check_span(std::span<T> s, const char* fn, const char* name, const char* dims, int64_t n,
                bool optional = false) {
  check(int64_t(s.size()) == n || (optional && s.empty()), fn, ": ", name, ": expected ",
        optional ? "0 or " : "", dims, " = ", n, " elements, got ", s.size());
}

// w[c], or 1 when the optional per-channel scale w is empty.
inline float weight_or_one(std::span<const float> w, int64_t c) {
  return w.empty() ? 1.0f : w[size_t(c)];
}

// b[c], or 0 when the optional per-channel shift b is empty.
inline float bias_or_zero(std::span<const float> b, int64_t c) {
  return b.empty() ? 0.0f : b[size_t(c)];
}

// True if an optional output view was given (data non-null).
template <class T>
bool present(const View<T, 2>& v) {
  return v.data != nullptr;
}

// Calls body(c0, c1) over column blocks [0, cols) of kColumnBlock channels: the layout used for
// parameter-gradient reductions over tokens (each block sums its tokens in order).
constexpr int64_t kColumnBlock = 64;
void parallel_columns(int64_t cols, const std::function<void(int64_t, int64_t)>& body);

// C[m, n] = alpha·op(A)·op(B) + beta·C like sgemm, split into fixed tiles of C that parallel_for
// computes with one-thread sgemm calls (on oneDNN's matmul where sgemm_onednn_applies,
// ops/gemm_onednn.hpp); epilogue(i0, i1, j0, j1), if set,
// runs on each finished tile. Tiles (of equal size; at least 4 for products of >= 2^24
// multiply-adds) depend only on (m, n, k): bitwise identical for any thread count.
void parallel_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc,
                    const std::function<void(int64_t, int64_t, int64_t, int64_t)>& epilogue = {});

// C[m, n] = A[m, k]·op(W) (assigned) where W is a weight: op(W) [k, n], W row-major with row
// stride ldw, stored [n, k] when trans_w (y = x·Wᵀ: trans_w; d_x = d_y·W: not). Where
// packed_gemm_applies, W is packed once (per training step through current_weight_pack_cache(),
// else per call) and fixed row tiles of C (a function of m only) run sgemm_packed in
// parallel_for; elsewhere parallel_sgemm. Bitwise identical for any thread count. epilogue as
// parallel_sgemm's (weight_product.cpp).
void weight_product(bool trans_w, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                    const float* w, int64_t ldw, float* c, int64_t ldc,
                    const std::function<void(int64_t, int64_t, int64_t, int64_t)>& epilogue = {});

// Σ_j x[j] and Σ_j x[j]·y[j] accumulated in double (eight independent partial sums).
double sum_double(const float* x, int64_t n);
double dot_double(const float* x, const float* y, int64_t n);
// s += Σ (x[i] - k) and q += Σ (x[i] - k)² over i < n (one plane: float partial sums in vector
// lanes, n / lanes terms each, added to s and q in double).
void shifted_sums_double(const float* x, int64_t n, double k, double& s, double& q);

// Row stride of a [rows, cols] view, usable as a BLAS leading dimension (>= max(1, cols)).
template <class T>
int64_t ld(const View<T, 2>& v) {
  return v.shape[0] <= 1 ? std::max<int64_t>(v.shape[1], 1) : v.stride[0];
}

// Span of a row-major [rows, cols] view's row r.
template <class T>
std::span<T> row(const View<T, 2>& v, int64_t r) {
  return {v.data + r * v.stride[0], size_t(v.shape[1])};
}

// y[T, out] = x[T, in]·w[out, in]ᵀ + b (b may be empty) on parallel_sgemm tiles; no checks
// (linear_forward and logits_forward share it).
void matmul_bias(View2 y, ConstView2 x, ConstView2 w, std::span<const float> b);

// Argument checks of each family, shared by its fast path and its reference (defined in the
// family's fast .cpp). `fn` is the public function's name, used as the message prefix; each
// throws attnkit::Error naming the argument with expected vs actual values.
void check_linear_forward(const char* fn, View2 y, ConstView2 x, ConstView2 w,
                          std::span<const float> b);
void check_linear_backward(const char* fn, View2 d_x, View2 d_w, std::span<float> d_b,
                           ConstView2 d_y, ConstView2 x, ConstView2 w);
// Every ids[t] in [0, v).
void check_ids(const char* fn, const char* name, std::span<const int32_t> ids, int64_t v);
void check_embedding(const char* fn, const char* out_name, ConstView2 out,
                     std::span<const int32_t> ids, ConstView2 table, const char* table_name);
void check_norm(const char* fn, ConstView2 out, const char* out_name, ConstView2 x,
                std::span<const float> w, std::span<const float> b);
// A parameter gradient is only accepted when the parameter exists.
void check_norm_grads(const char* fn, std::span<const float> w, std::span<float> d_w,
                      std::span<const float> b, std::span<float> d_b);
void check_eps(const char* fn, float eps);
// An optional d_residual of a norm backward is absent or [T, C] like x.
void check_residual(const char* fn, ConstView2 d_residual, ConstView2 x);
// Every argument of layer_norm_backward (d_b may be empty) or, with mean empty and d_b empty,
// of rms_norm_backward (the fast path and the reference share these checks).
void check_norm_backward(const char* fn, ConstView2 d_x, std::span<float> d_w,
                         std::span<float> d_b, ConstView2 d_y, ConstView2 x,
                         std::span<const float> w, std::span<const float> mean,
                         std::span<const float> rstd, ConstView2 d_residual, bool layer_norm);
// Every named view is [T, C] with the first view's T and C.
void check_elementwise(const char* fn,
                       std::initializer_list<std::pair<const char*, ConstView2>> views);
void check_rope(const char* fn, const View3& x, std::span<const int64_t> positions,
                const RopeOptions& opts);
void check_dropout(const char* fn, const DropoutOptions& opts);
// Every target < v (negative targets are ignored tokens).
void check_targets(const char* fn, std::span<const int32_t> targets, int64_t v);
void check_cross_entropy(const char* fn, ConstView2 logits, std::span<const int32_t> targets);
void check_linear_cross_entropy(const char* fn, ConstView2 h, ConstView2 w,
                                std::span<const float> b, std::span<const int32_t> targets);

// Cross-entropy bookkeeping: the tokens with a target >= 0, and Σ losses / n (0 if n = 0).
std::vector<int64_t> valid_rows(std::span<const int32_t> targets);
float mean_loss(std::span<float> losses, int64_t n_valid);

}  // namespace attnkit::nn
