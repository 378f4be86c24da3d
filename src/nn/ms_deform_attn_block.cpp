// MSDeformAttn forward and backward (nn/ms_deform_attn_block.hpp), built from the linear layer
// and the deformable attention op; the softmax and the location arithmetic are done here.
// Backward, from the forward in the header:
//   d_attn = d_out·W_o;  ms_deform_attn_backward → d_value, d_loc, d_weights
//   d_value ← 0 where padded;  d_input_flatten = d_value·W_v
//   d_logits = p ⊙ (d_weights - Σ_k p_k·d_weights_k) per (b, q, h)
//   d_offsets = d_loc / (W_l, H_l);  d_reference_points[b, q, l] = Σ_{h, p} d_loc[b, q, h, l, p]
//   d_query = d_offsets·W_off + d_logits·W_aw
// PyTorch: Deformable DETR's MSDeformAttn.forward with ms_deform_attn_core_pytorch.
#include "attnkit/nn/ms_deform_attn_block.hpp"

#include <cmath>
#include <vector>

#include "attnkit/attention/ms_deform_attn.hpp"
#include "attnkit/core/parallel.hpp"
#include "attnkit/nn/linear.hpp"

namespace attnkit {
namespace {

constexpr const char* kFn = "MSDeformAttn";

template <class T, int R>
bool contiguous(const View<T, R>& v) {
  int64_t s = 1;
  for (int d = R - 1; d >= 0; --d) {
    if (v.shape[d] > 1 && v.stride[d] != s) return false;
    s *= v.shape[d];
  }
  return true;
}

template <class T, int R>
void check_tensor(const View<T, R>& v, const char* name, const char* dims,
                  const std::array<int64_t, size_t(R)>& want) {
  for (int d = 0; d < R; ++d)
    check(v.shape[d] == want[size_t(d)], kFn, ": ", name, " ", dims, ": dimension ", d, " is ",
          v.shape[d], ", expected ", want[size_t(d)]);
  check(v.data != nullptr || v.numel() == 0, kFn, ": ", name, ": null data");
  check(contiguous(v), kFn, ": ", name, " must be contiguous");
}

template <class T>
void check_len(std::span<T> s, const char* name, int64_t n) {
  check(int64_t(s.size()) == n, kFn, ": ", name, ": expected ", n, " elements, got ", s.size());
}

template <class T>
void check_mat(const View<T, 2>& v, const char* name, int64_t rows, int64_t cols) {
  check_tensor(v, name, "[out, in]", {rows, cols});
}

// [N, M, C] contiguous → [N·M, C].
template <class T>
View<T, 2> rows_of(const View<T, 3>& v) {
  return {v.data, {v.shape[0] * v.shape[1], v.shape[2]}, {v.shape[2], 1}};
}

void linear_fwd(const MsDeformAttnBlockOptions& o, View2 y, ConstView2 x, ConstView2 w,
                std::span<const float> b) {
  (o.reference ? linear_forward_reference : linear_forward)(y, x, w, b);
}

void linear_bwd(const MsDeformAttnBlockOptions& o, View2 d_x, View2 d_w, std::span<float> d_b,
                ConstView2 d_y, ConstView2 x, ConstView2 w) {
  (o.reference ? linear_backward_reference : linear_backward)(d_x, d_w, d_b, d_y, x, w);
}

struct Dims {  // B, Q, S, C and K = Lv·P
  int64_t b, q, s, c, k;
};
Dims dims_of(const MsDeformAttnBlockInputs& in, const MsDeformAttnBlockOptions& o) {
  return {in.query.shape[0], in.query.shape[1], in.input_flatten.shape[1], o.d_model,
          o.levels * o.points};
}

// Validates the call (validate_ms_deform_attn_block) and returns its sizes.
Dims checked_dims(const MsDeformAttnBlockInputs& in, const MsDeformAttnBlockParams& p,
                  const MsDeformAttnBlockOptions& o) {
  validate_ms_deform_attn_block(in, p, o);
  return dims_of(in, o);
}

MsDeformAttnArgs op_args(const MsDeformAttnBlockInputs& in, const MsDeformAttnBlockCache& c,
                         const MsDeformAttnBlockOptions& o) {
  const Dims d = dims_of(in, o);
  MsDeformAttnArgs a;
  a.value = View<const float, 4>::contiguous(c.value.data(), {d.b, d.s, o.heads, o.head_dim()});
  a.spatial_shapes = in.spatial_shapes;
  a.level_start_index = in.level_start_index;
  a.sampling_locations = View<const float, 6>::contiguous(
      c.locations.data(), {d.b, d.q, o.heads, o.levels, o.points, 2});
  a.attention_weights =
      View<const float, 5>::contiguous(c.weights.data(), {d.b, d.q, o.heads, o.levels, o.points});
  return a;
}

}  // namespace

void validate_ms_deform_attn_block(const MsDeformAttnBlockInputs& in,
                                   const MsDeformAttnBlockParams& p,
                                   const MsDeformAttnBlockOptions& o) {
  o.validate();
  const auto [b, q, s, c, k] = dims_of(in, o);
  check_tensor(in.query, "query", "[B, Q, C]", {b, q, c});
  check_tensor(in.input_flatten, "input_flatten", "[B, S, C]", {b, s, c});
  check_tensor(in.reference_points, "reference_points", "[B, Q, Lv, 2]", {b, q, o.levels, 2});
  check(int64_t(in.spatial_shapes.size()) == 2 * o.levels, kFn, ": spatial_shapes [Lv, 2]: has ",
        in.spatial_shapes.size(), " entries, expected 2·opts.levels = ", 2 * o.levels);
  check(in.padding_mask.empty() || int64_t(in.padding_mask.size()) == b * s, kFn,
        ": padding_mask [B, S]: expected 0 or ", b * s, " entries, got ", in.padding_mask.size());
  check_mat(p.value_proj_weight, "value_proj_weight", c, c);
  check_len(p.value_proj_bias, "value_proj_bias", c);
  check_mat(p.sampling_offsets_weight, "sampling_offsets_weight", o.offsets_width(), c);
  check_len(p.sampling_offsets_bias, "sampling_offsets_bias", o.offsets_width());
  check_mat(p.attention_weights_weight, "attention_weights_weight", o.weights_width(), c);
  check_len(p.attention_weights_bias, "attention_weights_bias", o.weights_width());
  check_mat(p.output_proj_weight, "output_proj_weight", c, c);
  check_len(p.output_proj_bias, "output_proj_bias", c);
}

void ms_deform_attn_block_forward(View3 out, MsDeformAttnBlockCache& cache,
                                  const MsDeformAttnBlockInputs& in,
                                  const MsDeformAttnBlockParams& p,
                                  const MsDeformAttnBlockOptions& o) {
  const auto [b, q, s, c, k] = checked_dims(in, p, o);
  check_tensor(out, "out", "[B, Q, C]", {b, q, c});
  cache.value = Tensor<float, 2>({b * s, c});
  cache.offsets = Tensor<float, 2>({b * q, o.offsets_width()});
  cache.weights = Tensor<float, 2>({b * q, o.weights_width()});
  cache.locations = Tensor<float, 2>({b * q, o.offsets_width()});
  cache.attn = Tensor<float, 2>({b * q, c});

  linear_fwd(o, cache.value.view(), rows_of(in.input_flatten), p.value_proj_weight,
             p.value_proj_bias);
  if (!in.padding_mask.empty())
    for (int64_t i = 0; i < b * s; ++i)
      if (in.padding_mask[size_t(i)]) std::fill_n(cache.value.view().ptr(i), c, 0.0f);
  const ConstView2 query = rows_of(in.query);
  linear_fwd(o, cache.offsets.view(), query, p.sampling_offsets_weight, p.sampling_offsets_bias);
  linear_fwd(o, cache.weights.view(), query, p.attention_weights_weight, p.attention_weights_bias);

  parallel_for(b * q, [&](int64_t i) {
    // Softmax over the Lv·P logits of each head (double accumulation, max subtracted).
    float* wr = cache.weights.view().ptr(i);
    std::vector<double> e(static_cast<size_t>(k));
    for (int64_t h = 0; h < o.heads; ++h) {
      float* z = wr + h * k;
      double m = z[0], sum = 0;
      for (int64_t j = 1; j < k; ++j) m = std::max(m, double(z[j]));
      for (int64_t j = 0; j < k; ++j) sum += e[size_t(j)] = std::exp(double(z[j]) - m);
      for (int64_t j = 0; j < k; ++j) z[j] = float(e[size_t(j)] / sum);
    }
    // loc = reference point + offset / (W_l, H_l).
    const float* off = cache.offsets.view().ptr(i);
    float* loc = cache.locations.view().ptr(i);
    const float* ref = in.reference_points.ptr(i / q, i % q);
    for (int64_t h = 0; h < o.heads; ++h)
      for (int64_t l = 0; l < o.levels; ++l) {
        const double hl = double(in.spatial_shapes[size_t(2 * l)]);
        const double wl = double(in.spatial_shapes[size_t(2 * l + 1)]);
        for (int64_t pt = 0; pt < o.points; ++pt) {
          const int64_t j = ((h * o.levels + l) * o.points + pt) * 2;
          loc[j] = float(double(ref[2 * l]) + double(off[j]) / wl);
          loc[j + 1] = float(double(ref[2 * l + 1]) + double(off[j + 1]) / hl);
        }
      }
  });

  MsDeformAttnArgs a = op_args(in, cache, o);
  a.out = View3::contiguous(cache.attn.data(), {b, q, c});
  (o.reference ? ms_deform_attn_reference : ms_deform_attn)(a);
  linear_fwd(o, rows_of(out), cache.attn.view(), p.output_proj_weight, p.output_proj_bias);
}

void ms_deform_attn_block_backward(View3 d_query, View3 d_input_flatten,
                                   View<float, 4> d_reference_points,
                                   const MsDeformAttnBlockGrads& g, ConstView3 d_out,
                                   const MsDeformAttnBlockInputs& in,
                                   const MsDeformAttnBlockCache& cache,
                                   const MsDeformAttnBlockParams& p,
                                   const MsDeformAttnBlockOptions& o) {
  const auto [b, q, s, c, k] = checked_dims(in, p, o);
  check_tensor(d_out, "d_out", "[B, Q, C]", {b, q, c});
  check(cache.attn.numel() == b * q * c && cache.value.numel() == b * s * c, kFn,
        ": cache: not filled by a forward of these shapes");
  if (d_query.data) check_tensor(d_query, "d_query", "[B, Q, C]", {b, q, c});
  if (d_input_flatten.data)
    check_tensor(d_input_flatten, "d_input_flatten", "[B, S, C]", {b, s, c});
  if (d_reference_points.data)
    check_tensor(d_reference_points, "d_reference_points", "[B, Q, Lv, 2]", {b, q, o.levels, 2});

  Tensor<float, 2> d_attn({b * q, c});
  linear_bwd(o, d_attn.view(), g.output_proj_weight, g.output_proj_bias, rows_of(d_out),
             cache.attn.view(), p.output_proj_weight);

  Tensor<float, 2> d_value({b * s, c}), d_loc({b * q, o.offsets_width()}),
      d_w({b * q, o.weights_width()});
  const MsDeformAttnArgs a = op_args(in, cache, o);
  const MsDeformAttnGrads ga{
      .d_out = ConstView3::contiguous(d_attn.data(), {b, q, c}),
      .d_value = View<float, 4>::contiguous(d_value.data(), {b, s, o.heads, o.head_dim()}),
      .d_sampling_locations =
          View<float, 6>::contiguous(d_loc.data(), {b, q, o.heads, o.levels, o.points, 2}),
      .d_attention_weights =
          View<float, 5>::contiguous(d_w.data(), {b, q, o.heads, o.levels, o.points})};
  (o.reference ? ms_deform_attn_reference_backward : ms_deform_attn_backward)(a, ga);

  if (!in.padding_mask.empty())
    for (int64_t i = 0; i < b * s; ++i)
      if (in.padding_mask[size_t(i)]) std::fill_n(d_value.view().ptr(i), c, 0.0f);
  linear_bwd(o, d_input_flatten.data ? rows_of(d_input_flatten) : View2{}, g.value_proj_weight,
             g.value_proj_bias, d_value.view(), rows_of(in.input_flatten), p.value_proj_weight);

  // d_logits (in place of d_w) and d_offsets (in place of d_loc); d_reference_points.
  parallel_for(b * q, [&](int64_t i) {
    float* dw = d_w.view().ptr(i);
    const float* pw = cache.weights.view().ptr(i);
    for (int64_t h = 0; h < o.heads; ++h) {
      double dot = 0;
      for (int64_t j = h * k; j < (h + 1) * k; ++j) dot += double(pw[j]) * double(dw[j]);
      for (int64_t j = h * k; j < (h + 1) * k; ++j)
        dw[j] = float(double(pw[j]) * (double(dw[j]) - dot));
    }
    float* dl = d_loc.view().ptr(i);
    for (int64_t l = 0; l < o.levels; ++l) {
      const double hl = double(in.spatial_shapes[size_t(2 * l)]);
      const double wl = double(in.spatial_shapes[size_t(2 * l + 1)]);
      double rx = 0, ry = 0;
      for (int64_t h = 0; h < o.heads; ++h)
        for (int64_t pt = 0; pt < o.points; ++pt) {
          const int64_t j = ((h * o.levels + l) * o.points + pt) * 2;
          rx += dl[j];
          ry += dl[j + 1];
          dl[j] = float(double(dl[j]) / wl);
          dl[j + 1] = float(double(dl[j + 1]) / hl);
        }
      if (d_reference_points.data) {
        d_reference_points(i / q, i % q, l, 0) = float(rx);
        d_reference_points(i / q, i % q, l, 1) = float(ry);
      }
    }
  });

  const ConstView2 query = rows_of(in.query);
  Tensor<float, 2> d_query_aw;
  if (d_query.data) d_query_aw = Tensor<float, 2>({b * q, c});
  linear_bwd(o, d_query.data ? rows_of(d_query) : View2{}, g.sampling_offsets_weight,
             g.sampling_offsets_bias, d_loc.view(), query, p.sampling_offsets_weight);
  linear_bwd(o, d_query.data ? d_query_aw.view() : View2{}, g.attention_weights_weight,
             g.attention_weights_bias, d_w.view(), query, p.attention_weights_weight);
  if (d_query.data) {
    float* dq = d_query.data;
    const float* extra = d_query_aw.data();
    for (int64_t i = 0; i < b * q * c; ++i) dq[i] += extra[i];
  }
}

}  // namespace attnkit
