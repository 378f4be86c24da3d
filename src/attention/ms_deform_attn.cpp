// Fast multi-scale deformable attention (ms_deform_attn.hpp), float32 with Highway vectors over
// Dh. Corner weights are computed in double (exact pixel coordinates, as the reference) and
// rounded once to float; vector and scalar-tail updates are both single-rounding FMAs, so an
// element's bits never depend on where a vector block starts.
//
// Forward: parallel over (b, q); each work item owns out[b, q, :] and accumulates w·β_k·V_k rows
// straight into it, levels and points in order.
// Backward, two passes (formulas in ms_deform_attn_reference.cpp):
//   1. parallel over (b, q): the four dot products g·V_k of each point give d_w and d_loc;
//   2. parallel over (b, h, channel block): each work item owns d_value[b, :, h, block] and visits
//      queries, levels and points in order, adding w·β_k·g. No atomics, no per-thread copies, and
//      the summation order of every element is fixed, so any thread count gives the same bits.
#include <algorithm>
#include <cmath>

#include "attnkit/attention/ms_deform_attn.hpp"
#include "attnkit/core/parallel.hpp"
#include "hwy/highway.h"

namespace attnkit {
namespace hn = hwy::HWY_NAMESPACE;

namespace {

using D = hn::ScalableTag<float>;

struct Level {
  int64_t h, w, start;
};

// One sampling point's in-map corners: rows in S and float weights w·β_k (and β_k, ∂β/∂c).
struct Taps {
  int n = 0;
  int64_t row[4];
  float coef[4];          // w·β_k (forward and d_value)
  double beta[4];         // β_k
  double dbx[4], dby[4];  // ∂β_k/∂cx, ∂β_k/∂cy
};

Taps taps(const Level& lv, float x, float y, float w) {
  Taps t;
  const BilinearCorners c = bilinear_corners(x, y, lv.h, lv.w);
  if (!c.valid) return t;
  for (int k = 0; k < 4; ++k) {
    const int dy = k / 2, dx = k % 2;
    const int64_t yy = c.y0 + dy, xx = c.x0 + dx;
    if (yy < 0 || yy >= lv.h || xx < 0 || xx >= lv.w) continue;
    const double wy = dy ? c.ly : 1 - c.ly, wx = dx ? c.lx : 1 - c.lx;
    t.row[t.n] = lv.start + yy * lv.w + xx;
    t.beta[t.n] = wy * wx;
    t.coef[t.n] = float(double(w) * wy * wx);
    t.dbx[t.n] = (dx ? 1.0 : -1.0) * wy;
    t.dby[t.n] = (dy ? 1.0 : -1.0) * wx;
    ++t.n;
  }
  return t;
}

std::vector<Level> levels(const MsDeformAttnArgs& a) {
  std::vector<Level> out(a.level_start_index.size());
  for (size_t l = 0; l < out.size(); ++l)
    out[l] = {a.spatial_shapes[2 * l], a.spatial_shapes[2 * l + 1], a.level_start_index[l]};
  return out;
}

// y[0, n) += c·x[0, n).
inline void axpy(float* y, float c, const float* x, int64_t n) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  const auto vc = hn::Set(d, c);
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes)
    hn::StoreU(hn::MulAdd(vc, hn::LoadU(d, x + j), hn::LoadU(d, y + j)), d, y + j);
  for (; j < n; ++j) y[j] = std::fma(c, x[j], y[j]);
}

// dots[k] = g·rows[k] for k < n (n <= 4), g read once.
inline void dots4(double* dots, const float* g, const float* const* rows, int n, int64_t len) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t j = 0;
  for (; j + lanes <= len; j += lanes) {
    const auto vg = hn::LoadU(d, g + j);
    if (n > 0) a0 = hn::MulAdd(vg, hn::LoadU(d, rows[0] + j), a0);
    if (n > 1) a1 = hn::MulAdd(vg, hn::LoadU(d, rows[1] + j), a1);
    if (n > 2) a2 = hn::MulAdd(vg, hn::LoadU(d, rows[2] + j), a2);
    if (n > 3) a3 = hn::MulAdd(vg, hn::LoadU(d, rows[3] + j), a3);
  }
  float s[4] = {hn::GetLane(hn::SumOfLanes(d, a0)), hn::GetLane(hn::SumOfLanes(d, a1)),
                hn::GetLane(hn::SumOfLanes(d, a2)), hn::GetLane(hn::SumOfLanes(d, a3))};
  for (; j < len; ++j)
    for (int k = 0; k < n; ++k) s[k] = std::fma(g[j], rows[k][j], s[k]);
  for (int k = 0; k < 4; ++k) dots[k] = k < n ? double(s[k]) : 0.0;
}

}  // namespace

void ms_deform_attn(const MsDeformAttnArgs& a) {
  validate(a);
  const auto& loc = a.sampling_locations;
  const auto& wt = a.attention_weights;
  const int64_t bn = loc.shape[0], qn = loc.shape[1], hn_ = loc.shape[2], lvn = loc.shape[3],
                pn = loc.shape[4], dh = a.value.shape[3];
  const std::vector<Level> lv = levels(a);
  parallel_for(bn * qn, [&](int64_t i) {
    const int64_t b = i / qn, q = i % qn;
    float* orow = a.out.ptr(b, q);
    for (int64_t h = 0; h < hn_; ++h) {
      float* o = orow + h * dh;
      std::fill(o, o + dh, 0.0f);
      for (int64_t l = 0; l < lvn; ++l)
        for (int64_t p = 0; p < pn; ++p) {
          const Taps t = taps(lv[size_t(l)], loc(b, q, h, l, p, 0), loc(b, q, h, l, p, 1),
                              wt(b, q, h, l, p));
          for (int k = 0; k < t.n; ++k) axpy(o, t.coef[k], a.value.ptr(b, t.row[k], h), dh);
        }
    }
  });
}

namespace {

// Pass 1: d_attention_weights and d_sampling_locations of query (b, q), all heads.
void point_grads(const MsDeformAttnArgs& a, const MsDeformAttnGrads& g,
                 const std::vector<Level>& lv, int64_t b, int64_t q) {
  const auto& loc = a.sampling_locations;
  const int64_t hn_ = loc.shape[2], lvn = loc.shape[3], pn = loc.shape[4], dh = a.value.shape[3];
  const float* grow = g.d_out.ptr(b, q);
  for (int64_t h = 0; h < hn_; ++h)
    for (int64_t l = 0; l < lvn; ++l)
      for (int64_t p = 0; p < pn; ++p) {
        const float w = a.attention_weights(b, q, h, l, p);
        const Taps t = taps(lv[size_t(l)], loc(b, q, h, l, p, 0), loc(b, q, h, l, p, 1), w);
        const float* rows[4] = {};
        for (int k = 0; k < t.n; ++k) rows[k] = a.value.ptr(b, t.row[k], h);
        double dots[4];
        dots4(dots, grow + h * dh, rows, t.n, dh);
        double d_w = 0, d_cx = 0, d_cy = 0;
        for (int k = 0; k < t.n; ++k) {
          d_w += t.beta[k] * dots[k];
          d_cx += t.dbx[k] * dots[k];
          d_cy += t.dby[k] * dots[k];
        }
        g.d_attention_weights(b, q, h, l, p) = float(d_w);
        g.d_sampling_locations(b, q, h, l, p, 0) = float(double(w) * d_cx * double(lv[size_t(l)].w));
        g.d_sampling_locations(b, q, h, l, p, 1) = float(double(w) * d_cy * double(lv[size_t(l)].h));
      }
}

// Pass 2: d_value[b, :, h, c0:c1] = Σ over queries, levels, points (in order) of w·β_k·g.
void value_grads(const MsDeformAttnArgs& a, const MsDeformAttnGrads& g,
                 const std::vector<Level>& lv, int64_t b, int64_t h, int64_t c0, int64_t c1) {
  const auto& loc = a.sampling_locations;
  const int64_t qn = loc.shape[1], lvn = loc.shape[3], pn = loc.shape[4], sn = a.value.shape[1],
                dh = a.value.shape[3];
  for (int64_t s = 0; s < sn; ++s) {
    float* r = g.d_value.ptr(b, s, h) + c0;
    std::fill(r, r + (c1 - c0), 0.0f);
  }
  for (int64_t q = 0; q < qn; ++q) {
    const float* gq = g.d_out.ptr(b, q) + h * dh + c0;
    for (int64_t l = 0; l < lvn; ++l)
      for (int64_t p = 0; p < pn; ++p) {
        const Taps t = taps(lv[size_t(l)], loc(b, q, h, l, p, 0), loc(b, q, h, l, p, 1),
                            a.attention_weights(b, q, h, l, p));
        for (int k = 0; k < t.n; ++k)
          axpy(g.d_value.ptr(b, t.row[k], h) + c0, t.coef[k], gq, c1 - c0);
      }
  }
}

}  // namespace

void ms_deform_attn_backward(const MsDeformAttnArgs& a, const MsDeformAttnGrads& g) {
  validate_backward(a, g);
  const auto& loc = a.sampling_locations;
  const int64_t bn = loc.shape[0], qn = loc.shape[1], hn_ = loc.shape[2], dh = a.value.shape[3];
  const std::vector<Level> lv = levels(a);
  parallel_for(bn * qn, [&](int64_t i) { point_grads(a, g, lv, i / qn, i % qn); });
  // Channel blocks only add parallelism when B·H is small; they never change an element's sum.
  const int64_t kMinBlock = 16;
  const int64_t want_blocks = (4 * int64_t(num_threads()) + bn * hn_ - 1) / (bn * hn_);
  const int64_t blocks = std::clamp<int64_t>(want_blocks, 1, std::max<int64_t>(1, dh / kMinBlock));
  const int64_t width = (dh + blocks - 1) / blocks;
  parallel_for(bn * hn_ * blocks, [&](int64_t i) {
    const int64_t blk = i % blocks, bh = i / blocks;
    const int64_t c0 = blk * width, c1 = std::min(dh, c0 + width);
    if (c0 < c1) value_grads(a, g, lv, bh / hn_, bh % hn_, c0, c1);
  });
}

}  // namespace attnkit
