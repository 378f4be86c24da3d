// Reference multi-scale deformable attention: scalar loops, double accumulation, the spec.
// PyTorch (Deformable DETR's ms_deform_attn_core_pytorch): per level, grid_sample the level's
// [B·H, Dh, H_l, W_l] map at 2·loc - 1 (bilinear, zeros, align_corners=False), weight by w and
// sum over levels and points.
//
// Backward, from out_h = Σ_{l,p} w·Σ_k β_k·V_k (β_k the four bilinear weights, V_k the corner
// rows, zero outside) and g = d_out_h:
//   d_value[V_k] += w·β_k·g;   d_w = Σ_k β_k·(g·V_k);
//   d_cx = w·Σ_k (∂β_k/∂cx)·(g·V_k),  cx = x·W - 0.5, so d_x = W·d_cx (and y with H).
#include <vector>

#include "attnkit/attention/ms_deform_attn.hpp"

namespace attnkit {
namespace {

struct Corner {
  int64_t row = -1;        // position in S (level offset included); -1 = outside the map
  double beta = 0;         // bilinear weight
  double dbeta_dx = 0;     // ∂β/∂cx
  double dbeta_dy = 0;     // ∂β/∂cy
};

// The four corners of a location on level l, in the order (y0,x0), (y0,x1), (y1,x0), (y1,x1).
std::array<Corner, 4> corners(const MsDeformAttnArgs& a, int64_t l, float x, float y) {
  const int64_t hl = a.spatial_shapes[size_t(2 * l)], wl = a.spatial_shapes[size_t(2 * l + 1)];
  const BilinearCorners c = bilinear_corners(x, y, hl, wl);
  std::array<Corner, 4> out{};
  if (!c.valid) return out;
  for (int k = 0; k < 4; ++k) {
    const int dy = k / 2, dx = k % 2;
    const int64_t yy = c.y0 + dy, xx = c.x0 + dx;
    const double wy = dy ? c.ly : 1 - c.ly, wx = dx ? c.lx : 1 - c.lx;
    Corner& o = out[size_t(k)];
    o.dbeta_dx = (dx ? 1.0 : -1.0) * wy;
    o.dbeta_dy = (dy ? 1.0 : -1.0) * wx;
    o.beta = wy * wx;
    if (yy >= 0 && yy < hl && xx >= 0 && xx < wl)
      o.row = a.level_start_index[size_t(l)] + yy * wl + xx;
  }
  return out;
}

}  // namespace

void ms_deform_attn_reference(const MsDeformAttnArgs& a) {
  validate(a);
  const auto& loc = a.sampling_locations;
  const int64_t bn = loc.shape[0], qn = loc.shape[1], hn = loc.shape[2], lvn = loc.shape[3],
                pn = loc.shape[4], dh = a.value.shape[3];
  std::vector<double> acc(static_cast<size_t>(dh));
  for (int64_t b = 0; b < bn; ++b)
    for (int64_t q = 0; q < qn; ++q)
      for (int64_t h = 0; h < hn; ++h) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t l = 0; l < lvn; ++l)
          for (int64_t p = 0; p < pn; ++p) {
            const double w = a.attention_weights(b, q, h, l, p);
            for (const Corner& c : corners(a, l, loc(b, q, h, l, p, 0), loc(b, q, h, l, p, 1))) {
              if (c.row < 0) continue;
              for (int64_t d = 0; d < dh; ++d) acc[size_t(d)] += w * c.beta * a.value(b, c.row, h, d);
            }
          }
        for (int64_t d = 0; d < dh; ++d) a.out(b, q, h * dh + d) = float(acc[size_t(d)]);
      }
}

void ms_deform_attn_reference_backward(const MsDeformAttnArgs& a, const MsDeformAttnGrads& g) {
  validate_backward(a, g);
  const auto& loc = a.sampling_locations;
  const int64_t bn = loc.shape[0], qn = loc.shape[1], hn = loc.shape[2], lvn = loc.shape[3],
                pn = loc.shape[4], sn = a.value.shape[1], dh = a.value.shape[3];
  std::vector<double> dv(size_t(bn * sn * hn * dh), 0.0);  // [B, S, H, Dh]
  for (int64_t b = 0; b < bn; ++b)
    for (int64_t q = 0; q < qn; ++q)
      for (int64_t h = 0; h < hn; ++h)
        for (int64_t l = 0; l < lvn; ++l) {
          const int64_t wl = a.spatial_shapes[size_t(2 * l + 1)], hl = a.spatial_shapes[size_t(2 * l)];
          for (int64_t p = 0; p < pn; ++p) {
            const double w = a.attention_weights(b, q, h, l, p);
            double d_w = 0, d_cx = 0, d_cy = 0;
            for (const Corner& c : corners(a, l, loc(b, q, h, l, p, 0), loc(b, q, h, l, p, 1))) {
              if (c.row < 0) continue;
              double gv = 0;  // g · V_k
              for (int64_t d = 0; d < dh; ++d) {
                const double gd = g.d_out(b, q, h * dh + d);
                gv += gd * a.value(b, c.row, h, d);
                dv[size_t(((b * sn + c.row) * hn + h) * dh + d)] += w * c.beta * gd;
              }
              d_w += c.beta * gv;
              d_cx += c.dbeta_dx * gv;
              d_cy += c.dbeta_dy * gv;
            }
            g.d_attention_weights(b, q, h, l, p) = float(d_w);
            g.d_sampling_locations(b, q, h, l, p, 0) = float(w * d_cx * double(wl));
            g.d_sampling_locations(b, q, h, l, p, 1) = float(w * d_cy * double(hl));
          }
        }
  for (int64_t b = 0; b < bn; ++b)
    for (int64_t s = 0; s < sn; ++s)
      for (int64_t h = 0; h < hn; ++h)
        for (int64_t d = 0; d < dh; ++d)
          g.d_value(b, s, h, d) = float(dv[size_t(((b * sn + s) * hn + h) * dh + d)]);
}

}  // namespace attnkit
