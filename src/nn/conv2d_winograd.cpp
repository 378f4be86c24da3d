// 3×3, stride-1, padding-1 convolutions by Winograd's minimal filtering F(2×2, 3×3) (Lavin & Gray,
// "Fast Algorithms for Convolutional Neural Networks", 2016). Each 2×2 block of outputs ("tile")
// reads a 4×4 input patch d; with V = Bᵀ·d·B and U = G·g·Gᵀ for each 3×3 filter g, the tile is
// Aᵀ·(Σ_c U ⊙ V)·A. The 16 element-wise products summed over channels are 16 GEMMs
// M[ξ] = U[ξ][O, C]·V[ξ][C, tiles]: 16 multiplies per tile instead of 36 (2.25× fewer flops on
// even sides). The transforms use only 0, ±1 and ±1/2, so the rounding error stays within a
// small multiple of the direct convolution's (the tests check it against float64).
// The input gradient is the same kind of convolution, of d_y with the filters transposed and
// rotated by 180°. The weight gradient runs the adjoint: dU[ξ] = Σ_tiles (A·dY·Aᵀ)[ξ] ⊙ V[ξ], 16
// GEMMs [O, tiles]·[tiles, C], then dg = Gᵀ·dU·G.
//
// Chunks of images run in parallel; each chunk transforms its inputs into per-thread scratch,
// runs the 16 GEMMs and writes its own outputs, so results do not depend on the thread count.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "attnkit/core/parallel.hpp"
#include "attnkit/core/workspace.hpp"
#include "attnkit/ops/gemm.hpp"
#include "conv2d_common.hpp"
#include "core/prefetch.hpp"
#include "hwy/highway.h"

namespace attnkit::nn {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Fewer channels give GEMMs with K = C too thin to pay for the transforms; 8 is a judgement, not a
// measurement (the CNN's stem, 1 channel, and CBAM's 2 → 1 gate stay on im2col).
constexpr int64_t kMinChannels = 8;
// Planes below 12×12 that small_plane does not take (9×9 to 11×11 with 16 lanes) stay on im2col +
// sgemm: they waste tiles and pay the row-by-row transforms' per-plane overhead on few pixels.
// Measured on the CNN's shapes (1 thread, batch 128): 14×14 layers 1.4–1.8× faster than
// im2col + sgemm; 7×7 layers 0.8–0.9× as fast with the row-by-row transforms, 1.1–1.3× faster
// with the one-vector transforms (small_plane); with 8 lanes, on two vectors, the CNN's step
// 1.10× (AMX Xeon, `avx2` build).
constexpr int64_t kMinSide = 12;
constexpr int64_t kChunkFloats = 128 << 10;  // V of one chunk (16·C·tiles) stays in L2 (512 KiB)

struct Tiles {
  int64_t th, tw, t;  // tile rows, tile columns, tiles per image
  // Vectors of tiles per plane on the gather / permutation transforms (input_transform_small,
  // output_transform_small), 0 for other planes: all tiles of a plane in one vector with a row
  // of the plane in less than one (2·TW < lanes), or, on planes the row-by-row path does not take
  // (a side below 12), in one or two vectors that each hold whole rows of tiles and a row of the
  // plane (7×7 with 8 lanes: two rows of 4 tiles per vector).
  int64_t vectors;
  int64_t rows_per_vector;  // tile rows per vector (vectors > 0)
};
Tiles tiles_of(const Conv2dGeometry& g) {
  const int64_t th = (g.h + 1) / 2, tw = (g.w + 1) / 2, t = th * tw, lanes = int64_t(hn::Lanes(DF()));
  if (t <= lanes && 2 * tw < lanes) return {th, tw, t, 1, th};
  const bool below_row_path = g.h < kMinSide || g.w < kMinSide;
  const bool whole_rows = 2 * tw <= lanes && lanes % tw == 0;
  if (below_row_path && whole_rows && t <= 2 * lanes) return {th, tw, t, (t + lanes - 1) / lanes, lanes / tw};
  return {th, tw, t, 0, 0};
}
bool small_plane(const Tiles& t) { return t.vectors > 0; }

float* scratch(int which, int64_t n) { return conv_scratch(which, n); }

// U[ξ][o][c] = (G·g·Gᵀ)[ξ] for the 3×3 filter g linking input channel c to output channel o:
// g = w[o, c] or, when `flip_transpose`, w[c, o] rotated by 180° (w is then [C, O, 3, 3]).
void transform_weights(float* u, const float* w, int64_t o_n, int64_t c_n, bool flip_transpose) {
  // Lanes are input channels c0 .. c0 + lanes - 1 of one output channel: each filter tap is one
  // gather (filters sit 9 floats apart, or 9·O when transposed) and each U plane one store.
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df)), step = o_n * c_n;  // step: between ξ and ξ + 1
  const hn::RebindToSigned<DF> di;
  const int64_t stride = flip_transpose ? 9 * o_n : 9;
  parallel_for(o_n, [&](int64_t o) {
    const auto half = hn::Set(df, 0.5f);
    for (int64_t c0 = 0; c0 < c_n; c0 += lanes) {
      const int64_t count = std::min(lanes, c_n - c0);
      // Lanes past the last channel repeat it (valid addresses; their results are not stored).
      const auto idx = hn::Mul(hn::Min(hn::Iota(di, 0), hn::Set(di, int32_t(count - 1))),
                               hn::Set(di, int32_t(stride)));
      const float* src = flip_transpose ? w + (c0 * o_n + o) * 9 : w + (o * c_n + c0) * 9;
      VF g[3][3];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
          g[i][j] = hn::GatherIndex(df, src + (flip_transpose ? (2 - i) * 3 + (2 - j) : i * 3 + j), idx);
      VF t[4][3];  // G·g
      for (int j = 0; j < 3; ++j) {
        const auto outer = hn::Add(g[0][j], g[2][j]);
        t[0][j] = g[0][j];
        t[1][j] = hn::Mul(half, hn::Add(outer, g[1][j]));
        t[2][j] = hn::Mul(half, hn::Sub(outer, g[1][j]));
        t[3][j] = g[2][j];
      }
      const auto in = hn::FirstN(df, size_t(count));
      for (int i = 0; i < 4; ++i) {  // (G·g)·Gᵀ
        float* dst = u + (i * 4) * step + o * c_n + c0;
        const auto outer = hn::Add(t[i][0], t[i][2]);
        hn::BlendedStore(t[i][0], in, df, dst);
        hn::BlendedStore(hn::Mul(half, hn::Add(outer, t[i][1])), in, df, dst + step);
        hn::BlendedStore(hn::Mul(half, hn::Sub(outer, t[i][1])), in, df, dst + 2 * step);
        hn::BlendedStore(t[i][2], in, df, dst + 3 * step);
      }
    }
  });
}

// Floats per row-transformed row: every column the column pass of input_transform reads (for
// each group of `lanes` tiles, 2·lanes columns from 2k, or lanes when the group fits in half a
// vector, each plus 3), rounded up to whole vectors.
int64_t padded_row(const Tiles& t) {
  const int64_t lanes = int64_t(hn::Lanes(DF()));
  const int64_t groups = (t.tw + lanes - 1) / lanes, last = t.tw - (groups - 1) * lanes;
  const int64_t reach = 2 * lanes * (groups - 1) + (last <= lanes / 2 ? lanes : 2 * lanes) + 3;
  return (reach + lanes - 1) / lanes * lanes;
}

// V[ξ][c][col0 + tile] = (Bᵀ·d·B)[ξ] for every tile of one plane x[H, W]; v points at tile 0 of
// ξ = 0, and the ξ planes are `plane` floats apart. Per row of tiles: Bᵀ on the four padded
// input rows (whole-row vectors), then B on the columns: for tile k the columns 2k .. 2k + 3,
// computed for every column q and kept at the even q (ConcatEven).
void input_transform(float* v, int64_t plane, const float* x, const Conv2dGeometry& g,
                     const Tiles& t) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df)), rl = padded_row(t);
  // Bᵀ·d for every row of tiles ([TH][4][rl]), all written before any is read back: the column
  // pass reads them at shifted offsets, which would stall on store forwarding right after the
  // stores.
  float* trs = scratch(2, t.th * 4 * rl);
  // Padded row r, columns q .. q + lanes - 1: x's row r - 1 from column q - 1, zero outside.
  auto padded = [&](int64_t r, int64_t q) {
    if (r < 1 || r > g.h) return hn::Zero(df);
    const int64_t lo = std::max<int64_t>(0, 1 - q), hi = std::clamp<int64_t>(g.w + 1 - q, 0, lanes);
    if (hi <= lo) return hn::Zero(df);
    const auto in = hn::AndNot(hn::FirstN(df, size_t(lo)), hn::FirstN(df, size_t(hi)));
    // Lanes outside [lo, hi) are neither read nor faulted; the address may sit one float before
    // the plane (q = 0), so it is formed as an integer rather than by pointer arithmetic.
    const auto at = reinterpret_cast<std::uintptr_t>(x + (r - 1) * g.w + q) - sizeof(float);
    return hn::MaskedLoad(in, df, reinterpret_cast<const float*>(at));
  };
  for (int64_t ty = 0; ty < t.th; ++ty) {
    float* tr = trs + ty * 4 * rl;
    for (int64_t q = 0; q < rl; q += lanes) {
      const int64_t r = 2 * ty;
      const VF d0 = padded(r, q), d1 = padded(r + 1, q), d2 = padded(r + 2, q), d3 = padded(r + 3, q);
      hn::StoreU(hn::Sub(d0, d2), df, tr + q);
      hn::StoreU(hn::Add(d1, d2), df, tr + rl + q);
      hn::StoreU(hn::Sub(d2, d1), df, tr + 2 * rl + q);
      hn::StoreU(hn::Sub(d1, d3), df, tr + 3 * rl + q);
    }
  }
  for (int64_t ty = 0; ty < t.th; ++ty) {
    const float* tr = trs + ty * 4 * rl;
    for (int i = 0; i < 4; ++i) {
      const float* a = tr + i * rl;
      float* out = v + (4 * i) * plane + ty * t.tw;
      for (int64_t q = 0, k = 0; k < t.tw; q += 2 * lanes, k += lanes) {
        const bool half = t.tw - k <= lanes / 2;  // the even columns of one vector are enough
        auto even = [&](auto z) {  // the 2·lanes columns from q → their even ones, one per tile
          const VF lo = z(q);
          return hn::ConcatEven(df, half ? lo : z(q + lanes), lo);
        };
        const VF z0 = even([&](int64_t c) { return hn::Sub(hn::LoadU(df, a + c), hn::LoadU(df, a + c + 2)); });
        const VF z1 = even([&](int64_t c) { return hn::Add(hn::LoadU(df, a + c + 1), hn::LoadU(df, a + c + 2)); });
        const VF z2 = even([&](int64_t c) { return hn::Sub(hn::LoadU(df, a + c + 2), hn::LoadU(df, a + c + 1)); });
        const VF z3 = even([&](int64_t c) { return hn::Sub(hn::LoadU(df, a + c + 1), hn::LoadU(df, a + c + 3)); });
        const auto keep = hn::FirstN(df, size_t(std::min(lanes, t.tw - k)));
        hn::BlendedStore(z0, keep, df, out + k);
        hn::BlendedStore(z1, keep, df, out + plane + k);
        hn::BlendedStore(z2, keep, df, out + 2 * plane + k);
        hn::BlendedStore(z3, keep, df, out + 3 * plane + k);
      }
    }
  }
}

// Small planes (Tiles::vectors: one or two vectors of tiles, e.g. 7×7 with 16 or 8 lanes): per
// vector of tiles, each of the 16 inputs d[k][l] of every tile is one gather from the plane x
// (idx[4k + l][tile], -1 where the input lies in the zero padding or past the last tile: those
// lanes read x[0] and are zeroed), then Bᵀ·d·B runs on whole vectors. (Copying the plane into a
// zero-bordered buffer first made the first gather wait for the copy's stores: store-to-load
// forwarding does not serve gathers.)
void input_transform_small(float* v, int64_t plane, const float* x, const Tiles& t, const int32_t* idx) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const int64_t lanes = int64_t(hn::Lanes(df)), nv = t.vectors, row = nv * lanes;
  const auto none = hn::Set(di, -1);
  for (int64_t q = 0; q < nv; ++q) {  // the tiles q·lanes .. q·lanes + lanes - 1
    VF d[4][4];
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 4; ++l) {
        const auto at = hn::LoadU(di, idx + (4 * k + l) * row + q * lanes);
        const auto inside = hn::RebindMask(df, hn::Gt(at, none));
        d[k][l] = hn::IfThenElseZero(inside, hn::GatherIndex(df, x, hn::Max(at, hn::Zero(di))));
      }
    VF r[4][4];  // Bᵀ·d
    for (int l = 0; l < 4; ++l) {
      r[0][l] = hn::Sub(d[0][l], d[2][l]);
      r[1][l] = hn::Add(d[1][l], d[2][l]);
      r[2][l] = hn::Sub(d[2][l], d[1][l]);
      r[3][l] = hn::Sub(d[1][l], d[3][l]);
    }
    const auto keep = hn::FirstN(df, size_t(std::min(lanes, t.t - q * lanes)));
    float* vq = v + q * lanes;
    for (int i = 0; i < 4; ++i) {  // (Bᵀ·d)·B
      hn::BlendedStore(hn::Sub(r[i][0], r[i][2]), keep, df, vq + (4 * i) * plane);
      hn::BlendedStore(hn::Add(r[i][1], r[i][2]), keep, df, vq + (4 * i + 1) * plane);
      hn::BlendedStore(hn::Sub(r[i][2], r[i][1]), keep, df, vq + (4 * i + 2) * plane);
      hn::BlendedStore(hn::Sub(r[i][1], r[i][3]), keep, df, vq + (4 * i + 3) * plane);
    }
  }
}

// output_transform for small planes: per vector of tiles, the four outputs of its tiles are four
// vectors, and each output row is two lane permutations of them (rows[ty]: lane j takes tile
// ty·TW + j/2, counted from the vector's first tile) blended by column parity, stored without a
// round trip through memory.
void output_transform_small(float* y, const float* m, int64_t plane, const Conv2dGeometry& g,
                            const Tiles& t, const int32_t* rows) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const int64_t lanes = int64_t(hn::Lanes(df)), nv = t.vectors, rows_per = t.rows_per_vector;
  const auto odd = hn::RebindMask(df, hn::Eq(hn::And(hn::Iota(di, 0), hn::Set(di, 1)), hn::Set(di, 1)));
  const auto keep = hn::FirstN(df, size_t(g.w));
  for (int64_t q = 0; q < nv; ++q) {
    const auto in = hn::FirstN(df, size_t(std::min(lanes, t.t - q * lanes)));
    const float* mq = m + q * lanes;
    VF s[4], d[4];
    for (int j = 0; j < 4; ++j) {
      const VF m0 = hn::MaskedLoad(in, df, mq + j * plane), m1 = hn::MaskedLoad(in, df, mq + (4 + j) * plane);
      const VF m2 = hn::MaskedLoad(in, df, mq + (8 + j) * plane), m3 = hn::MaskedLoad(in, df, mq + (12 + j) * plane);
      s[j] = hn::Add(hn::Add(m0, m1), m2);
      d[j] = hn::Sub(hn::Sub(m1, m2), m3);
    }
    const VF y00 = hn::Add(hn::Add(s[0], s[1]), s[2]), y01 = hn::Sub(hn::Sub(s[1], s[2]), s[3]);
    const VF y10 = hn::Add(hn::Add(d[0], d[1]), d[2]), y11 = hn::Sub(hn::Sub(d[1], d[2]), d[3]);
    for (int64_t ty = q * rows_per; ty < std::min(t.th, (q + 1) * rows_per); ++ty) {
      const auto idx = hn::IndicesFromVec(df, hn::LoadU(di, rows + ty * lanes));
      const VF top = hn::IfThenElse(odd, hn::TableLookupLanes(y01, idx), hn::TableLookupLanes(y00, idx));
      hn::BlendedStore(top, keep, df, y + 2 * ty * g.w);
      if (2 * ty + 1 < g.h) {
        const VF bottom = hn::IfThenElse(odd, hn::TableLookupLanes(y11, idx), hn::TableLookupLanes(y10, idx));
        hn::BlendedStore(bottom, keep, df, y + (2 * ty + 1) * g.w);
      }
    }
  }
}

// The row permutations of output_transform_small: rows[ty·lanes + j] = ty·TW + j/2 - (the first
// tile of ty's vector) for j < 2·TW, else 0.
std::vector<int32_t> small_plane_rows(const Tiles& t) {
  const int64_t lanes = int64_t(hn::Lanes(DF()));
  std::vector<int32_t> rows(size_t(t.th * lanes), 0);
  for (int64_t ty = 0; ty < t.th; ++ty)
    for (int64_t j = 0; j < 2 * t.tw; ++j)
      rows[size_t(ty * lanes + j)] = int32_t(ty * t.tw + j / 2 - ty / t.rows_per_vector * lanes);
  return rows;
}

// The gather indices of input_transform_small: idx[(4k + l)·nv·lanes + tile] = the plane offset
// of input (k, l) of that tile, x's row 2·(tile / TW) + k - 1 and column 2·(tile % TW) + l - 1, or
// -1 where that lies outside the plane (the zero padding) and for lanes past the last tile.
std::vector<int32_t> small_plane_indices(const Tiles& t, const Conv2dGeometry& g) {
  const int64_t row = t.vectors * int64_t(hn::Lanes(DF()));
  std::vector<int32_t> idx(size_t(16 * row), -1);
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < 4; ++l)
      for (int64_t tile = 0; tile < t.t; ++tile) {
        const int64_t r = 2 * (tile / t.tw) + k - 1, c = 2 * (tile % t.tw) + l - 1;
        if (r >= 0 && r < g.h && c >= 0 && c < g.w) idx[size_t((4 * k + l) * row + tile)] = int32_t(r * g.w + c);
      }
  return idx;
}

// y[OH, OW] of one output plane = Aᵀ·m·A for every tile, m[ξ] = m + ξ·plane + tile. The four
// outputs of every tile are computed over all tiles at once, then interleaved into rows; tiles
// past an odd edge are clipped.
void output_transform(float* y, const float* m, int64_t plane, const Conv2dGeometry& g,
                      const Tiles& t) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  const int64_t tt = (t.t + lanes - 1) / lanes * lanes;  // room for whole vectors
  const int64_t row = (t.tw + lanes - 1) / lanes * 2 * lanes;
  float* yt = scratch(2, 4 * tt + row + lanes);  // + lanes: the rows' last loads read past y11
  float* y00 = yt;
  float* y01 = yt + tt;
  float* y10 = yt + 2 * tt;
  float* y11 = yt + 3 * tt;
  float* line = yt + 4 * tt;
  for (int64_t k = 0; k < t.t; k += lanes) {
    const auto in = hn::FirstN(df, size_t(std::min(lanes, t.t - k)));
    VF s[4], d[4];
    for (int j = 0; j < 4; ++j) {
      const VF m0 = hn::MaskedLoad(in, df, m + j * plane + k), m1 = hn::MaskedLoad(in, df, m + (4 + j) * plane + k);
      const VF m2 = hn::MaskedLoad(in, df, m + (8 + j) * plane + k), m3 = hn::MaskedLoad(in, df, m + (12 + j) * plane + k);
      s[j] = hn::Add(hn::Add(m0, m1), m2);
      d[j] = hn::Sub(hn::Sub(m1, m2), m3);
    }
    hn::StoreU(hn::Add(hn::Add(s[0], s[1]), s[2]), df, y00 + k);
    hn::StoreU(hn::Sub(hn::Sub(s[1], s[2]), s[3]), df, y01 + k);
    hn::StoreU(hn::Add(hn::Add(d[0], d[1]), d[2]), df, y10 + k);
    hn::StoreU(hn::Sub(hn::Sub(d[1], d[2]), d[3]), df, y11 + k);
  }
  for (int64_t ty = 0; ty < t.th; ++ty) {
    const int64_t base = ty * t.tw;
    for (int half = 0; half < 2 && 2 * ty + half < g.h; ++half) {
      const float* left = (half == 0 ? y00 : y10) + base;
      const float* right = (half == 0 ? y01 : y11) + base;
      for (int64_t k = 0; k < t.tw; k += lanes)
        hn::StoreInterleaved2(hn::LoadU(df, left + k), hn::LoadU(df, right + k), df, line + 2 * k);
      float* dst = y + (2 * ty + half) * g.w;
      for (int64_t c = 0; c < g.w; c += lanes)
        hn::BlendedStore(hn::LoadU(df, line + c), hn::FirstN(df, size_t(std::min(lanes, g.w - c))), df, dst + c);
    }
  }
}

// Planes ahead of the one being transformed that the transforms prefetch. The transforms read (or
// write) each plane of x, d_y and y once, between accesses to 16 V or M planes, and the hardware
// prefetchers did not keep up: prefetching took input_transform's samples in `attnkit train cnn`
// down by about a quarter and output_transform's by about 40 % (Zen 5).
constexpr int64_t kPrefetchPlanes = 2;

// The plane kPrefetchPlanes after plane (b, c) in the (b, c) walk over images n0 .. n0 + nb - 1 of
// t ([N, C, H, W]), or null past the last.
template <class T>
const float* plane_ahead(View<T, 4> t, int64_t n0, int64_t nb, int64_t b, int64_t c) {
  const int64_t channels = t.shape[1], next = b * channels + c + kPrefetchPlanes;
  return next < nb * channels ? t.ptr(n0 + next / channels, next % channels) : nullptr;
}

// Prefetches every cache line of the plane at p (`floats` contiguous floats; nothing for null), for
// reading, or for writing when kWrite. Always inlined (core/prefetch.hpp says why).
template <bool kWrite = false>
[[gnu::always_inline]] inline void prefetch_plane(const float* p, int64_t floats) {
  if (p == nullptr) return;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t line = at & ~std::uintptr_t(63);  // from its first line's start
  const auto* from = reinterpret_cast<const std::byte*>(line);
  const int64_t bytes = int64_t(at - line) + floats * int64_t(sizeof(float));
  if constexpr (kWrite) prefetch_range_for_write(from, bytes);
  else prefetch_range(from, bytes);
}

// V[ξ][c][b·T + tile] for images n0 .. n0 + nb - 1 of x (V's rows hold nb·T floats); `idx` is
// small_plane_indices(t, g) for small planes, else null.
void transform_inputs(float* v, ConstView4 x, int64_t n0, int64_t nb, const Conv2dGeometry& g,
                      const Tiles& t, const int32_t* idx) {
  const int64_t cols = nb * t.t;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t c = 0; c < g.c; ++c) {
      float* vc = v + c * cols + b * t.t;
      prefetch_plane(plane_ahead(x, n0, nb, b, c), g.h * g.w);
      if (idx) input_transform_small(vc, g.c * cols, x.ptr(n0 + b, c), t, idx);
      else input_transform(vc, g.c * cols, x.ptr(n0 + b, c), g, t);
    }
}

// dM[ξ][o][col0 + tile] = (A·dY·Aᵀ)[ξ] for every 2×2 output tile dY of one plane dy[OH, OW]
// (zeros past an odd edge): the adjoint of output_transform. dm points at tile 0 of ξ = 0, ξ
// planes `plane` floats apart. Rows 2ty and 2ty + 1 are loaded whole; their even and odd
// columns (ConcatEven / ConcatOdd) are the two columns of every tile.
void gradient_transform(float* dm, int64_t plane, const float* dy, const Conv2dGeometry& g,
                        const Tiles& t) {
  const DF df;
  const int64_t lanes = int64_t(hn::Lanes(df));
  auto load = [&](int64_t r, int64_t q) {  // dy row r, columns q .. q + lanes - 1, zero outside
    if (r >= g.h || q >= g.w) return hn::Zero(df);
    return hn::MaskedLoad(hn::FirstN(df, size_t(std::min(lanes, g.w - q))), df, dy + r * g.w + q);
  };
  for (int64_t ty = 0; ty < t.th; ++ty)
    for (int64_t q = 0, k = 0; k < t.tw; q += 2 * lanes, k += lanes) {
      const VF a_lo = load(2 * ty, q), a_hi = load(2 * ty, q + lanes);
      const VF b_lo = load(2 * ty + 1, q), b_hi = load(2 * ty + 1, q + lanes);
      const VF e0 = hn::ConcatEven(df, a_hi, a_lo), o0 = hn::ConcatOdd(df, a_hi, a_lo);
      const VF e1 = hn::ConcatEven(df, b_hi, b_lo), o1 = hn::ConcatOdd(df, b_hi, b_lo);
      // A·dY: rows dY0, dY0 + dY1, dY0 - dY1, -dY1 (even and odd columns apart).
      const VF re[4] = {e0, hn::Add(e0, e1), hn::Sub(e0, e1), hn::Neg(e1)};
      const VF ro[4] = {o0, hn::Add(o0, o1), hn::Sub(o0, o1), hn::Neg(o1)};
      const auto keep = hn::FirstN(df, size_t(std::min(lanes, t.tw - k)));
      float* out = dm + ty * t.tw + k;
      for (int i = 0; i < 4; ++i) {  // (A·dY)·Aᵀ: columns c0, c0 + c1, c0 - c1, -c1
        hn::BlendedStore(re[i], keep, df, out + (4 * i) * plane);
        hn::BlendedStore(hn::Add(re[i], ro[i]), keep, df, out + (4 * i + 1) * plane);
        hn::BlendedStore(hn::Sub(re[i], ro[i]), keep, df, out + (4 * i + 2) * plane);
        hn::BlendedStore(hn::Neg(ro[i]), keep, df, out + (4 * i + 3) * plane);
      }
    }
}

}  // namespace

bool winograd_applies(const Conv2dGeometry& g) {
  return g.kh == 3 && g.kw == 3 && g.stride == 1 && g.pad == 1 && g.oh == g.h && g.ow == g.w &&
         g.c >= kMinChannels && g.o >= kMinChannels &&
         ((g.h >= kMinSide && g.w >= kMinSide) || small_plane(tiles_of(g)));
}

void winograd_conv3x3(View4 y, ConstView4 x, const float* w, bool flip_transpose,
                      const Conv2dGeometry& g) {
  const Tiles t = tiles_of(g);
  std::vector<float> u(size_t(16 * g.o * g.c));
  transform_weights(u.data(), w, g.o, g.c, flip_transpose);
  // Images per chunk: a function of the geometry only.
  const int64_t per = std::clamp<int64_t>(kChunkFloats / (16 * g.c * t.t), 1, g.n);
  const bool small = small_plane(t);
  const std::vector<int32_t> idx = small ? small_plane_indices(t, g) : std::vector<int32_t>{};
  const std::vector<int32_t> rows = small ? small_plane_rows(t) : std::vector<int32_t>{};
  const int64_t chunks = (g.n + per - 1) / per;
  BlasThreadsScope blas(1);
  parallel_for(chunks, [&](int64_t ch) {
    const int64_t n0 = ch * per, nb = std::min(per, g.n - n0), cols = nb * t.t;
    float* v = scratch(0, 16 * g.c * cols);
    float* m = scratch(1, 16 * g.o * cols);
    transform_inputs(v, x, n0, nb, g, t, small ? idx.data() : nullptr);
    sgemm_batched(false, false, 16, g.o, cols, g.c, u.data(), g.c, g.o * g.c, v, cols,
                  g.c * cols, 0.0f, m, cols, g.o * cols);  // M[ξ] = U[ξ]·V[ξ]
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t o = 0; o < g.o; ++o) {
        prefetch_plane<true>(plane_ahead(y, n0, nb, b, o), g.h * g.w);
        const float* mo = m + o * cols + b * t.t;
        if (small) output_transform_small(y.ptr(n0 + b, o), mo, g.o * cols, g, t, rows.data());
        else output_transform(y.ptr(n0 + b, o), mo, g.o * cols, g, t);
      }
  });
}

bool winograd_weight_gradient_applies(const Conv2dGeometry& g) {
  return winograd_applies(g) && !small_plane(tiles_of(g));
}

void winograd_weight_gradient(View4 d_w, ConstView4 d_y, ConstView4 x, const Conv2dGeometry& g) {
  const Tiles t = tiles_of(g);
  // Fixed groups of images, each summing its chunks in order into its own partial dU[16][O][C];
  // the partials are then added in group order. (Inputs go through the row-by-row transform,
  // which serves any plane: winograd_weight_gradient_applies excludes the one-vector planes.)
  const ImageGroups image_groups = weight_gradient_groups(g.n);
  const int64_t per_group = image_groups.per, groups = image_groups.count;
  const int64_t per = std::clamp<int64_t>(kChunkFloats / (16 * std::max(g.c, g.o) * t.t), 1, per_group);
  const int64_t uf = 16 * g.o * g.c;
  thread_local std::vector<float> partial_buf;  // the calling thread's, reused across calls
  if (partial_buf.size() < size_t(groups * uf)) partial_buf.resize(size_t(groups * uf));
  float* partial = partial_buf.data();
  {
    BlasThreadsScope blas(1);
    parallel_for(groups, [&](int64_t grp) {
      const int64_t end = std::min(g.n, (grp + 1) * per_group);
      for (int64_t n0 = grp * per_group; n0 < end; n0 += per) {
        const int64_t nb = std::min(per, end - n0), cols = nb * t.t;
        float* v = scratch(0, 16 * g.c * cols);
        float* dm = scratch(1, 16 * g.o * cols);
        transform_inputs(v, x, n0, nb, g, t, nullptr);
        for (int64_t b = 0; b < nb; ++b)
          for (int64_t o = 0; o < g.o; ++o) {
            prefetch_plane(plane_ahead(d_y, n0, nb, b, o), g.h * g.w);
            gradient_transform(dm + o * cols + b * t.t, g.o * cols, d_y.ptr(n0 + b, o), g, t);
          }
        sgemm_batched(false, true, 16, g.o, g.c, cols, dm, cols, g.o * cols, v, cols, g.c * cols,
                      n0 == grp * per_group ? 0.0f : 1.0f, partial + grp * uf, g.c,
                      g.o * g.c);  // dU[ξ] (+)= dM[ξ]·V[ξ]ᵀ
      }
    });
  }
  // d_w[o, c] += Gᵀ·dU·G, dU summed over the groups in order: per output channel, the groups'
  // rows dU[ξ][o][0 .. C) are added whole (contiguous, vectorised) into sums[ξ][C], each element
  // in group order as before; a sum per element with the groups 16·O·C floats apart missed the
  // cache on every load.
  auto& spaces = thread_workspaces(sizeof(float) * size_t(16 * g.c) + 64);
  parallel_for(g.o, [&](int64_t o) {
    Workspace& ws = spaces[size_t(thread_index())];
    ws.reset();
    float* sums = ws.alloc<float>(size_t(16 * g.c));
    std::fill_n(sums, 16 * g.c, 0.0f);
    for (int64_t grp = 0; grp < groups; ++grp)
      for (int xi = 0; xi < 16; ++xi) {
        const float* p = partial + grp * uf + xi * g.o * g.c + o * g.c;
        float* acc = sums + xi * g.c;
        for (int64_t c = 0; c < g.c; ++c) acc[c] += p[c];
      }
    for (int64_t c = 0; c < g.c; ++c) {
      float du[4][4];
      for (int xi = 0; xi < 16; ++xi) du[xi / 4][xi % 4] = sums[xi * g.c + c];
      float r[3][4];  // Gᵀ·dU
      for (int b = 0; b < 4; ++b) {
        r[0][b] = du[0][b] + 0.5f * (du[1][b] + du[2][b]);
        r[1][b] = 0.5f * (du[1][b] - du[2][b]);
        r[2][b] = 0.5f * (du[1][b] + du[2][b]) + du[3][b];
      }
      float* dst = d_w.ptr(o, c);
      for (int i = 0; i < 3; ++i) {  // (Gᵀ·dU)·G
        dst[i * 3 + 0] += r[i][0] + 0.5f * (r[i][1] + r[i][2]);
        dst[i * 3 + 1] += 0.5f * (r[i][1] - r[i][2]);
        dst[i * 3 + 2] += 0.5f * (r[i][1] + r[i][2]) + r[i][3];
      }
    }
  });
}

}  // namespace attnkit::nn
