// 3×3, stride-1, padding-1 convolutions on planes of 5×5 to 8×8 by Winograd's
// minimal filtering F(4×4, 3×3) (Lavin & Gray, 2016; interpolation points 0,
// ±1, ±2 and ∞). Such a plane is 2×2 tiles of 4×4 outputs, each reading a 6×6
// input patch d; with V = Bᵀ·d·B and U = G·g·Gᵀ, a tile is Aᵀ·(Σ_c U ⊙ V)·A, so
// the 36 element-wise products summed over channels are 36 GEMMs M[ξ] = U[ξ][O,
// C]·V[ξ][C, tiles]: 144 multiplies per 8×8 plane against 256 with F(2×2, 3×3)
// (conv2d_winograd.cpp) and 441 for the direct 7×7 convolution. The transforms'
// constants (up to 8, and G's 1/6 and 1/24) make the rounding error a few times
// F(2×2, 3×3)'s; the tests check it against float64 within the convolution
// bars.
//
// A plane's 4 tiles take 4 lanes, so a vector holds the tiles of lanes/4 images
// (4 with AVX-512, 2 with AVX2): the input transform gathers each of the 36
// patch inputs of those images' planes at once, and the output transform
// scatters the 16 outputs of every tile into an 8×8 block per image, whose rows
// are then copied to y. V and M are laid out [ξ][channel][image·4 + tile].
// Chunks of images run in parallel, each with its own scratch, so results do
// not depend on the thread count.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/ops/gemm.hpp"
#include "conv2d_common.hpp"
#include "hwy/highway.h"

namespace attnkit::nn {
namespace hn = hwy::HWY_NAMESPACE;
namespace f43 {  // named: unity builds join this file with conv2d_winograd.cpp

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DI = hn::RebindToSigned<DF>;

constexpr int64_t kMinChannels = 8;  // as for F(2×2, 3×3)
constexpr int kXi = 36;              // transformed elements per tile (6×6)
constexpr int64_t kTiles = 4;        // tiles per plane (2×2)
// Images per chunk: V of one chunk is 36·C·4·images floats; 16 images give
// GEMMs 64 columns wide.
constexpr int64_t kChunkImages = 8;

int64_t lanes() { return int64_t(hn::Lanes(DF())); }
int64_t images_per_vector() { return lanes() / kTiles; }

// The filter taps of output channel o for input channels c0 .. c0 + lanes - 1
// (lanes past the last repeat it): g[i][j] = w[o, c, i, j], or with
// flip_transpose w[c, o, 2 - i, 2 - j].
HWY_INLINE void load_filters(VF g[3][3], const float* w, int64_t o, int64_t c0, int64_t o_n, int64_t c_n,
                             bool flip_transpose) {
  const DF df;
  const DI di;
  const int64_t count = std::min(lanes(), c_n - c0), stride = flip_transpose ? 9 * o_n : 9;
  const auto idx =
      hn::Mul(hn::Min(hn::Iota(di, 0), hn::Set(di, int32_t(count - 1))), hn::Set(di, int32_t(stride)));
  const float* src = flip_transpose ? w + (c0 * o_n + o) * 9 : w + (o * c_n + c0) * 9;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      g[i][j] = hn::GatherIndex(df, src + (flip_transpose ? (2 - i) * 3 + (2 - j) : i * 3 + j), idx);
}

// The transform matrices for the interpolation points 0, 1, -1, 2, -1/2 and ∞. Against 0, ±1, ±2
// and ∞ (Lavin & Gray's) they cut the rounding error about 4.6× on the CNN's 7×7 layers (float32
// against float64, 128 channels), to about 4.6× F(2×2, 3×3)'s.
constexpr float kG[6][3] = {{1.0f, 0.0f, 0.0f},
                            {-1.0f / 3, -1.0f / 3, -1.0f / 3},
                            {1.0f / 3, -1.0f / 3, 1.0f / 3},
                            {1.0f / 15, 2.0f / 15, 4.0f / 15},
                            {-16.0f / 15, 8.0f / 15, -4.0f / 15},
                            {0.0f, 0.0f, 1.0f}};
constexpr float kBT[6][6] = {{1.0f, 1.5f, -2.0f, -1.5f, 1.0f, 0.0f}, {0.0f, -1.0f, -2.5f, -0.5f, 1.0f, 0.0f},
                             {0.0f, 1.0f, 0.5f, -2.5f, 1.0f, 0.0f},  {0.0f, -0.5f, -1.0f, 0.5f, 1.0f, 0.0f},
                             {0.0f, 2.0f, -1.0f, -2.0f, 1.0f, 0.0f}, {0.0f, 1.0f, 1.5f, -2.0f, -1.5f, 1.0f}};
constexpr float kAT[4][6] = {{1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f},
                             {0.0f, 1.0f, -1.0f, 2.0f, -0.5f, 0.0f},
                             {0.0f, 1.0f, 1.0f, 4.0f, 0.25f, 0.0f},
                             {0.0f, 1.0f, -1.0f, 8.0f, -0.125f, 1.0f}};

// out[i] = Σ_j mat[i][j]·z[j] for a constant R×K matrix (zero terms skipped, ones added).
template <int R, int K>
HWY_INLINE void apply(VF out[R], const float (&mat)[R][K], const VF z[K]) {
  const DF df;
  _Pragma("GCC unroll 8") for (int i = 0; i < R; ++i) {
    VF acc = hn::Zero(df);
    bool first = true;
    _Pragma("GCC unroll 8") for (int j = 0; j < K; ++j) {
      const float a = mat[i][j];
      if (a == 0.0f) continue;
      if (first)
        acc = a == 1.0f ? z[j] : hn::Mul(hn::Set(df, a), z[j]);
      else
        acc = a == 1.0f ? hn::Add(acc, z[j]) : hn::MulAdd(hn::Set(df, a), z[j], acc);
      first = false;
    }
    out[i] = acc;
  }
}

HWY_INLINE void filter_rows(VF out[6], VF z0, VF z1, VF z2) {
  const VF z[3] = {z0, z1, z2};
  apply<6, 3>(out, kG, z);
}
HWY_INLINE void input_rows(VF out[6], const VF z[6]) { apply<6, 6>(out, kBT, z); }
HWY_INLINE void output_rows(VF out[4], const VF m[6]) { apply<4, 6>(out, kAT, m); }

// U[ξ][o][c] = (G·g·Gᵀ)[ξ] for every filter (as load_filters reads them).
void transform_weights(float* u, const float* w, int64_t o_n, int64_t c_n, bool flip_transpose) {
  const DF df;
  const int64_t step = o_n * c_n;  // between ξ and ξ + 1
  parallel_for(o_n, [&](int64_t o) {
    for (int64_t c0 = 0; c0 < c_n; c0 += lanes()) {
      VF g[3][3];
      load_filters(g, w, o, c0, o_n, c_n, flip_transpose);
      VF t[3][6];  // t[j] = G·(column j of g)
      for (int j = 0; j < 3; ++j) filter_rows(t[j], g[0][j], g[1][j], g[2][j]);
      const auto in = hn::FirstN(df, size_t(std::min(lanes(), c_n - c0)));
      for (int i = 0; i < 6; ++i) {  // row i of (G·g)·Gᵀ
        VF row[6];
        filter_rows(row, t[0][i], t[1][i], t[2][i]);
        for (int j = 0; j < 6; ++j) hn::BlendedStore(row[j], in, df, u + (6 * i + j) * step + o * c_n + c0);
      }
    }
  });
}

// Lane layout of one vector: lane i·4 + ty·2 + tx is tile (ty, tx) of the
// group's image i. in_idx[(6k + l)·lanes + lane] = the offset from the group's
// first plane of input (k, l) of that tile's patch, x's row 4ty + k - 1 and
// column 4tx + l - 1 of image i (planes `image` floats apart), or -1 in the
// zero padding. out_idx[(4r + s)·lanes + lane] = output (r, s) of that tile in
// an 8×8 block per image: i·64 + (4ty + r)·8 + 4tx + s.
struct Indices {
  std::vector<int32_t> in, out;
};
Indices indices(const Conv2dGeometry& g, int64_t image) {
  const int64_t n = lanes();
  Indices r{std::vector<int32_t>(size_t(kXi * n), -1), std::vector<int32_t>(size_t(16 * n))};
  for (int64_t lane = 0; lane < n; ++lane) {
    const int64_t i = lane / kTiles, ty = (lane % kTiles) / 2, tx = lane % 2;
    for (int k = 0; k < 6; ++k)
      for (int l = 0; l < 6; ++l) {
        const int64_t row = 4 * ty + k - 1, col = 4 * tx + l - 1;
        if (row >= 0 && row < g.h && col >= 0 && col < g.w)
          r.in[size_t((6 * k + l) * n + lane)] = int32_t(i * image + row * g.w + col);
      }
    for (int rr = 0; rr < 4; ++rr)
      for (int s = 0; s < 4; ++s)
        r.out[size_t((4 * rr + s) * n + lane)] = int32_t(i * 64 + (4 * ty + rr) * 8 + 4 * tx + s);
  }
  return r;
}

// V[ξ][c][col0 + lane] = (Bᵀ·d·B)[ξ] for the tiles of the group whose first
// plane is x (plane c of its first image); `valid` masks the lanes of images
// that exist. v points at ξ = 0, the ξ planes `plane` floats apart.
void input_transform(float* v, int64_t plane, const float* x, const int32_t* idx, hn::Mask<DF> valid) {
  const DF df;
  const DI di;
  const int64_t n = lanes();
  const auto none = hn::Set(di, -1);
  VF r[6][6];  // r[l] = Bᵀ·(column l of d)
  for (int l = 0; l < 6; ++l) {
    VF z[6];
    for (int k = 0; k < 6; ++k) {
      const auto at = hn::LoadU(di, idx + (6 * k + l) * n);
      const auto inside = hn::And(valid, hn::RebindMask(df, hn::Gt(at, none)));
      z[k] = hn::IfThenElseZero(inside, hn::GatherIndex(df, x, hn::Max(at, hn::Zero(di))));
    }
    input_rows(r[l], z);
  }
  for (int i = 0; i < 6; ++i) {  // row i of (Bᵀ·d)·B
    const VF z[6] = {r[0][i], r[1][i], r[2][i], r[3][i], r[4][i], r[5][i]};
    VF out[6];
    input_rows(out, z);
    for (int j = 0; j < 6; ++j) hn::BlendedStore(out[j], valid, df, v + (6 * i + j) * plane);
  }
}

// The output planes y_i[H, W] of the group's images (y0 is the first, planes
// `image` floats apart, `count` of them) from m (ξ = 0 of the group's column, ξ
// planes `plane` floats apart): Aᵀ·m·A per tile, scattered into 8×8 blocks,
// then copied row by row.
void output_transform(float* y0, int64_t image, int64_t count, const float* m, int64_t plane,
                      const Conv2dGeometry& g, const int32_t* idx, hn::Mask<DF> valid) {
  const DF df;
  const DI di;
  const int64_t n = lanes();
  VF r[6][4];  // r[j] = Aᵀ·(column j of m)
  for (int j = 0; j < 6; ++j) {
    VF z[6];
    for (int i = 0; i < 6; ++i) z[i] = hn::MaskedLoad(valid, df, m + (6 * i + j) * plane);
    output_rows(r[j], z);
  }
  alignas(64) float block[16 * HWY_MAX_BYTES / sizeof(float)];  // 8×8 per image
  for (int i = 0; i < 4; ++i) {                                 // row i of (Aᵀ·m)·A
    const VF z[6] = {r[0][i], r[1][i], r[2][i], r[3][i], r[4][i], r[5][i]};
    VF out[4];
    output_rows(out, z);
    for (int s = 0; s < 4; ++s) hn::ScatterIndex(out[s], df, block, hn::LoadU(di, idx + (4 * i + s) * n));
  }
  const hn::CappedTag<float, 8> d8;
  const auto cols = hn::FirstN(d8, size_t(g.w));
  for (int64_t i = 0; i < count; ++i)
    for (int64_t row = 0; row < g.h; ++row)
      hn::BlendedStore(hn::LoadU(d8, block + i * 64 + row * 8), cols, d8, y0 + i * image + row * g.w);
}

bool applies(const Conv2dGeometry& g) {
  return g.kh == 3 && g.kw == 3 && g.stride == 1 && g.pad == 1 && g.oh == g.h && g.ow == g.w &&
         g.c >= kMinChannels && g.o >= kMinChannels && g.h >= 5 && g.h <= 8 && g.w >= 5 && g.w <= 8 &&
         lanes() % kTiles == 0;
}

void conv3x3(View4 y, ConstView4 x, const float* w, bool flip_transpose, const Conv2dGeometry& g) {
  std::vector<float> u(size_t(kXi * g.o * g.c));
  transform_weights(u.data(), w, g.o, g.c, flip_transpose);
  const DF df;
  const int64_t ipv = images_per_vector();
  const int64_t per = std::min(kChunkImages, g.n), chunks = (g.n + per - 1) / per;
  const Indices idx = indices(g, x.stride[0]);
  BlasThreadsScope blas(1);
  parallel_for(chunks, [&](int64_t ch) {
    const int64_t n0 = ch * per, nb = std::min(per, g.n - n0), cols = nb * kTiles;
    float* v = conv_scratch(0, kXi * g.c * cols);
    float* m = conv_scratch(1, kXi * g.o * cols);
    for (int64_t b = 0; b < nb; b += ipv) {
      const auto valid = hn::FirstN(df, size_t(std::min(ipv, nb - b) * kTiles));
      for (int64_t c = 0; c < g.c; ++c)
        input_transform(v + c * cols + b * kTiles, g.c * cols, x.ptr(n0 + b, c), idx.in.data(), valid);
    }
    sgemm_batched(false, false, kXi, g.o, cols, g.c, u.data(), g.c, g.o * g.c, v, cols, g.c * cols, 0.0f, m,
                  cols,
                  g.o * cols);  // M[ξ] = U[ξ]·V[ξ]
    for (int64_t b = 0; b < nb; b += ipv) {
      const int64_t count = std::min(ipv, nb - b);
      const auto valid = hn::FirstN(df, size_t(count * kTiles));
      for (int64_t o = 0; o < g.o; ++o)
        output_transform(y.ptr(n0 + b, o), y.stride[0], count, m + o * cols + b * kTiles, g.o * cols, g,
                         idx.out.data(), valid);
    }
  });
}

}  // namespace f43

bool winograd4_applies(const Conv2dGeometry& g) { return f43::applies(g); }

void winograd4_conv3x3(View4 y, ConstView4 x, const float* w, bool flip_transpose, const Conv2dGeometry& g) {
  f43::conv3x3(y, x, w, flip_transpose, g);
}

}  // namespace attnkit::nn
