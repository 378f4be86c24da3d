// Argument checks and the bilinear sampling convention shared by the reference and the fast
// multi-scale deformable attention (ms_deform_attn.hpp).
#include <cmath>
#include <string>
#include <type_traits>

#include "attnkit/attention/ms_deform_attn.hpp"

namespace attnkit {
namespace {

constexpr int64_t kMaxSide = int64_t(1) << 24;  // per-level height/width bound (no overflow)

template <class T, int R>
void check_shape(const View<T, R>& v, const char* name, const char* layout,
                 const std::type_identity_t<std::array<int64_t, R>>& want) {
  for (int d = 0; d < R; ++d)
    check(v.shape[d] == want[d], "ms_deform_attn: ", name, " ", layout, ": dimension ", d,
          " is ", v.shape[d], ", expected ", want[d]);
  // null data, or extents whose product overflows (a null view of 2^62 × ... passed a numel() of 0)
  check_view_extents(v, (std::string("ms_deform_attn: ") + name + " " + layout).c_str());
}

template <class T, int R>
void check_inner(const View<T, R>& v, const char* name) {
  check(v.inner_contiguous(), "ms_deform_attn: ", name,
        ": last dimension must be contiguous (stride 1), got stride ", v.stride[R - 1]);
}

}  // namespace

void validate(const MsDeformAttnArgs& a, bool need_out) {
  const auto& v = a.value;
  check(v.data != nullptr, "ms_deform_attn: value [B, S, H, Dh]: missing (null data)");
  for (int d = 0; d < 4; ++d)
    check(v.shape[d] >= (d == 1 ? 0 : 1), "ms_deform_attn: value [B, S, H, Dh]: dimension ", d,
          " is ", v.shape[d], ", expected >= ", d == 1 ? 0 : 1);
  check_view_extents(v, "ms_deform_attn: value [B, S, H, Dh]");
  check_inner(v, "value");
  const int64_t b = v.shape[0], s = v.shape[1], h = v.shape[2], dh = v.shape[3];

  check(a.spatial_shapes.size() % 2 == 0 && !a.spatial_shapes.empty(),
        "ms_deform_attn: spatial_shapes [Lv, 2]: expected an even, non-zero number of entries, got ",
        a.spatial_shapes.size());
  const int64_t lv = int64_t(a.spatial_shapes.size() / 2);
  check(int64_t(a.level_start_index.size()) == lv, "ms_deform_attn: level_start_index [Lv]: has ",
        a.level_start_index.size(), " entries, expected Lv = ", lv, " (from spatial_shapes)");
  int64_t total = 0;
  for (int64_t l = 0; l < lv; ++l) {
    const int64_t hl = a.spatial_shapes[size_t(2 * l)], wl = a.spatial_shapes[size_t(2 * l + 1)];
    check(hl >= 1 && wl >= 1 && hl <= kMaxSide && wl <= kMaxSide,
          "ms_deform_attn: spatial_shapes[", l, "] = (", hl, ", ", wl,
          "): height and width must be in [1, ", kMaxSide, "]");
    check(a.level_start_index[size_t(l)] == total, "ms_deform_attn: level_start_index[", l,
          "] = ", a.level_start_index[size_t(l)], ", expected ", total,
          " (the sum of H·W over the levels before it)");
    total += hl * wl;
    check(total <= s, "ms_deform_attn: spatial_shapes: levels 0..", l, " hold ", total,
          " positions, more than value's S = ", s);
  }
  check(total == s, "ms_deform_attn: value [B, S, H, Dh]: S = ", s,
        ", expected Σ H_l·W_l = ", total, " from spatial_shapes");

  const auto& loc = a.sampling_locations;
  const int64_t q = loc.shape[1], p = loc.shape[4];
  check(q >= 0 && p >= 1,
        "ms_deform_attn: sampling_locations [B, Q, H, Lv, P, 2]: need Q >= 0 and P >= 1, got Q = ",
        q, ", P = ", p);
  check_shape(loc, "sampling_locations", "[B, Q, H, Lv, P, 2]", {b, q, h, lv, p, 2});
  check_shape(a.attention_weights, "attention_weights", "[B, Q, H, Lv, P]", {b, q, h, lv, p});
  if (!need_out) return;
  check_shape(a.out, "out", "[B, Q, H·Dh]", {b, q, h * dh});
  check_inner(a.out, "out");
}

void validate_backward(const MsDeformAttnArgs& a, const MsDeformAttnGrads& g) {
  validate(a, false);
  const auto& v = a.value;
  const auto& loc = a.sampling_locations;
  check_shape(g.d_out, "d_out", "[B, Q, H·Dh]",
              {v.shape[0], loc.shape[1], v.shape[2] * v.shape[3]});
  check_inner(g.d_out, "d_out");
  check_shape(g.d_value, "d_value", "[B, S, H, Dh]", v.shape);
  check_inner(g.d_value, "d_value");
  check_shape(g.d_sampling_locations, "d_sampling_locations", "[B, Q, H, Lv, P, 2]", loc.shape);
  check_shape(g.d_attention_weights, "d_attention_weights", "[B, Q, H, Lv, P]",
              a.attention_weights.shape);
}

BilinearCorners bilinear_corners(float x, float y, int64_t h, int64_t w) {
  // align_corners=False: pixel i covers [i, i + 1)·(1/W), centre (i + 0.5)/W. Exact in double.
  const double cx = double(x) * double(w) - 0.5, cy = double(y) * double(h) - 0.5;
  BilinearCorners c;
  // A corner is inside iff some of x0, x0 + 1 lies in [0, W): cx in [-1, W). At cx = -1 exactly
  // the inside corner has weight 0 but the location gradient (toward +x) is not zero, as in
  // grid_sample. Comparisons with NaN are false: a NaN location is "outside".
  if (!(cx >= -1.0 && cx < double(w) && cy >= -1.0 && cy < double(h))) return c;
  const double fx = std::floor(cx), fy = std::floor(cy);
  c.x0 = int64_t(fx);
  c.y0 = int64_t(fy);
  c.lx = cx - fx;
  c.ly = cy - fy;
  c.valid = true;
  return c;
}

}  // namespace attnkit
