// The flash packed tile products (flash_tile_kernels.hpp) on Highway's static target: packing of
// Q, Kᵀ and V, and one register-blocked micro-kernel (MR rows × 2 vectors) behind every product:
//   for each B panel, for each row block of C: for k: load 2 vectors of B[k, panel], broadcast
//   A[r, k] for the MR rows, 2·MR FMAs.
// A's strides are compile-time per product: Q (and dO) panels (scores), P rows (O += P·V,
// dQ += dS·K), P and dS columns (dV += Pᵀ·dO, dK += dSᵀ·Q, read in
// place: the MR broadcasts of a step are MR consecutive floats of one row of P).
// The B panel (16 KiB at D = 128 or 128 keys on AVX-512) stays in L1 while the row blocks stream
// past it.
#include "flash_tile_kernels.hpp"

#include <algorithm>
#include <limits>

#include "hwy/highway.h"

#ifndef HWY_UNROLL_ALL
#define HWY_UNROLL_ALL _Pragma("GCC unroll 16")
#endif

namespace attnkit::flash {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VU = hn::Vec<DU>;

constexpr uint32_t kExponentBits = 0x7f800000u;  // all set in NaN and ±inf only

// acc with the exponent fields of x's lanes folded in by an unsigned max: it reaches
// kExponentBits iff some lane was NaN or ±inf.
HWY_INLINE VU max_exponent(VU acc, VF x) {
  const DU du;
  return hn::Max(acc, hn::And(hn::BitCast(du, x), hn::Set(du, kExponentBits)));
}
HWY_INLINE bool no_exponent_overflow(VU acc) {
  return hn::GetLane(hn::MaxOfLanes(DU(), acc)) != kExponentBits;
}

constexpr int kMR = int(kRowBlock);
static_assert(hn::MaxLanes(DF()) == size_t(kLanes), "kLanes must match Highway's static target");

// The one micro-kernel behind every product: c[r, 0:2V] (+)= Σ_k A[r, k]·b[k, 0:2V] for the MR
// rows of one row block, with A[r, k] at a[(k / kChunk)·a_jump + r·kARow + (k % kChunk)·kACol]
// (compile-time strides: the MR broadcasts of a step use immediate offsets) and b advancing by
// 2V = kKeyPanel = kValuePanel floats per k. kChunk splits k into panels of a panel-packed A
// (a_jump floats apart); for an unsplit A it exceeds any k. Rows r >= mr are computed from
// whatever A holds there and never stored. With accumulate the block's sum, formed from zero,
// is added to c once (as BLAS does with beta = 1): a sum carried in c across many calls would
// take every rounding at the size of the running total.
template <int64_t kARow, int64_t kACol, int64_t kChunk>
HWY_INLINE void product_block(const float* HWY_RESTRICT a, int64_t a_jump, int64_t k_len,
                              const float* HWY_RESTRICT b, float* HWY_RESTRICT c, int64_t ldc,
                              int mr, bool accumulate) {
  static_assert(kKeyPanel == kValuePanel);
  const DF df;
  VF a0[kMR], a1[kMR];
  HWY_UNROLL_ALL for (int r = 0; r < kMR; ++r) a0[r] = a1[r] = hn::Zero(df);
  for (int64_t k0 = 0; k0 < k_len; k0 += kChunk, a += a_jump) {
    const int64_t kn = std::min(kChunk, k_len - k0);
    const float* ak = a;
    for (int64_t k = 0; k < kn; ++k, ak += kACol, b += kValuePanel) {
      const VF b0 = hn::Load(df, b), b1 = hn::Load(df, b + kLanes);
      HWY_UNROLL_ALL for (int r = 0; r < kMR; ++r) {
        const VF x = hn::Set(df, ak[r * kARow]);
        a0[r] = hn::MulAdd(x, b0, a0[r]);
        a1[r] = hn::MulAdd(x, b1, a1[r]);
      }
    }
  }
  HWY_UNROLL_ALL for (int r = 0; r < kMR; ++r) {
    if (r >= mr) break;
    if (accumulate) {
      a0[r] = hn::Add(hn::Load(df, c + r * ldc), a0[r]);
      a1[r] = hn::Add(hn::Load(df, c + r * ldc + kLanes), a1[r]);
    }
    hn::Store(a0[r], df, c + r * ldc);
    hn::Store(a1[r], df, c + r * ldc + kLanes);
  }
}

constexpr int64_t kWhole = int64_t(1) << 40;  // kChunk of an A that is not split into panels

// Longest sum a register carries before it joins c: c (+)= Σ_k over k_len in chunks of kSumChunk,
// each chunk's products summed from zero and added to c once. One register summing a 512-key
// tile's products rounds every addition at the size of the running partial sum: in the flash
// forward at D 16 (lq 65, lk 600) that put one output 5.8e-7 off, 3.6× PyTorch float32's worst;
// chunks of 256 keys bring it to 2.2e-7 for about 1 % of the forward's speed (128: 3 %).
constexpr int64_t kSumChunk = 256;

// product_block with accumulate over an unsplit A (A[r, k] at a[r·kARow + k·kACol]), the sum over
// k taken in chunks of kSumChunk.
template <int64_t kARow, int64_t kACol>
HWY_INLINE void accumulate_block(const float* HWY_RESTRICT a, int64_t k_len,
                                 const float* HWY_RESTRICT b, float* HWY_RESTRICT c, int64_t ldc,
                                 int mr) {
  for (int64_t k0 = 0; k0 < k_len; k0 += kSumChunk)
    product_block<kARow, kACol, kWhole>(a + k0 * kACol, 0, std::min(kSumChunk, k_len - k0),
                                        b + k0 * kValuePanel, c, ldc, mr, true);
}

// 2^f for f in [-0.5, 0.5]: 1 + f·P(f) with Cephes exp2f's degree-5 P (relative error 1.7e-7).
HWY_INLINE VF exp2_reduced(DF df, VF f) {
  VF p = hn::Set(df, 1.535336188319500e-4f);
  p = hn::MulAdd(p, f, hn::Set(df, 1.339887440266574e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 9.618437357674640e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 5.550332471162809e-2f));
  p = hn::MulAdd(p, f, hn::Set(df, 2.402264791363012e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 6.931472028550421e-1f));
  return hn::MulAdd(p, f, hn::Set(df, 1.0f));
}

}  // namespace

float tile_exp_sum(float* x, int64_t n, float m) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  // log2(e) in two parts: t·log2(e) - k must be accurate to 2^-24 for |t| up to 64.
  constexpr float kLog2eHi = 1.44269502162933349609375f;  // float(log2 e)
  constexpr float kLog2eLo = 1.925962989091e-8f;           // log2 e - kLog2eHi
  constexpr float kFloor = -64.0f;  // as exp_sub_sum: x - m below this gives exactly 0
  const VF vm = hn::Set(df, m), floor = hn::Set(df, kFloor);
  const VF hi = hn::Set(df, kLog2eHi), lo = hn::Set(df, kLog2eLo);
  const auto bias = hn::Set(di, 127);
  VF sum = hn::Zero(df);
  int64_t j = 0;
  auto one = [&](VF xv) {
    const VF t = hn::Sub(xv, vm);
    const VF tc = hn::Max(t, floor);  // t·log2(e) >= -92.4: 2^k stays a normal float
    const VF k = hn::Round(hn::Mul(tc, hi));
    const VF f = hn::MulAdd(tc, lo, hn::MulSub(tc, hi, k));  // t·log2(e) - k, in [-0.5, 0.5]
    const VF p = exp2_reduced(df, f);
    const VF two_k = hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, k), bias)));
    return hn::IfThenZeroElse(hn::Lt(t, floor), hn::Mul(p, two_k));
  };
  for (; j + kLanes <= n; j += kLanes) {
    const VF e = one(hn::LoadU(df, x + j));
    hn::StoreU(e, df, x + j);
    sum = hn::Add(sum, e);
  }
  if (j < n) {  // the tail through a padded copy
    alignas(64) float buf[kLanes];
    // Pad lanes give exactly 0: -inf, not m minus a margin (which equals m once |m| >= 2^31).
    std::fill(buf, buf + kLanes, -std::numeric_limits<float>::infinity());
    std::copy(x + j, x + n, buf);
    const VF e = one(hn::Load(df, buf));
    hn::Store(e, df, buf);
    std::copy(buf, buf + (n - j), x + j);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(df, sum));
}

#if HWY_TARGET <= HWY_AVX2
// dst[e·ldd + j] = src[j·lds + e] for an 8 × 8 block (8 rows of 8 floats in, their transpose out):
// 32-bit, then 64-bit interleaves within 128-bit halves, then the halves recombined (24 shuffles
// for 64 floats, against 64 scalar loads and stores).
HWY_INLINE void transpose_8x8(const float* HWY_RESTRICT src, int64_t lds, float* HWY_RESTRICT dst,
                              int64_t ldd) {
  const hn::FixedTag<float, 8> d8;
  const hn::Repartition<double, decltype(d8)> d64;
  using V8 = hn::Vec<decltype(d8)>;
  V8 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = hn::LoadU(d8, src + i * lds);
  for (int i = 0; i < 8; i += 2) {  // t[i] = a0 b0 a1 b1 | a4 b4 a5 b5, t[i + 1] = a2 b2 a3 b3 | a6 b6 a7 b7
    t[i] = hn::InterleaveLower(d8, r[i], r[i + 1]);
    t[i + 1] = hn::InterleaveUpper(d8, r[i], r[i + 1]);
  }
  auto pairs = [&](const V8& x, const V8& y, bool upper) {  // 64-bit interleave of two t's
    const auto xd = hn::BitCast(d64, x), yd = hn::BitCast(d64, y);
    return hn::BitCast(d8, upper ? hn::InterleaveUpper(d64, xd, yd) : hn::InterleaveLower(d64, xd, yd));
  };
  // u[c] holds column c (low half) and c + 4 (high half) of rows 0-3, w[c] the same of rows 4-7.
  const V8 u[4] = {pairs(t[0], t[2], false), pairs(t[0], t[2], true), pairs(t[1], t[3], false),
                   pairs(t[1], t[3], true)};
  const V8 w[4] = {pairs(t[4], t[6], false), pairs(t[4], t[6], true), pairs(t[5], t[7], false),
                   pairs(t[5], t[7], true)};
  for (int c = 0; c < 4; ++c) {
    hn::StoreU(hn::ConcatLowerLower(d8, w[c], u[c]), d8, dst + c * ldd);
    hn::StoreU(hn::ConcatUpperUpper(d8, w[c], u[c]), d8, dst + (c + 4) * ldd);
  }
}
#endif

bool pack_keys(const float* k, int64_t ld, int64_t s, int64_t d, float* kp) {
  // Blocks of 8 keys × 8 columns of D are transposed in registers (each K row's 8 floats read
  // contiguously); the keys and columns past the last whole block are copied one by one. The
  // panel (D × NK floats) stays in L1 while it is written, and is scanned there for NaN and inf
  // (an exact copy of the keys, zero-padded).
  const DF df;
  VU exps = hn::Zero(DU());
  for (int64_t p0 = 0; p0 < s; p0 += kKeyPanel) {
    float* panel = kp + p0 * d;
    const int64_t nk = std::min(kKeyPanel, s - p0);
    if (nk < kKeyPanel) std::fill(panel, panel + d * kKeyPanel, 0.0f);  // contiguous, then the keys
    int64_t jb = 0, eb = 0;  // keys and columns in whole 8 × 8 blocks (none without 8-lane vectors)
#if HWY_TARGET <= HWY_AVX2
    jb = nk / 8 * 8, eb = d / 8 * 8;
    for (int64_t j0 = 0; j0 < jb; j0 += 8)
      for (int64_t e0 = 0; e0 < eb; e0 += 8)
        transpose_8x8(k + (p0 + j0) * ld + e0, ld, panel + e0 * kKeyPanel + j0, kKeyPanel);
#endif
    for (int64_t j = 0; j < nk; ++j)
      for (int64_t e = j < jb ? eb : 0; e < d; ++e) panel[e * kKeyPanel + j] = k[(p0 + j) * ld + e];
    for (int64_t i = 0; i < d * kKeyPanel; i += kLanes)
      exps = max_exponent(exps, hn::Load(df, panel + i));
  }
  return no_exponent_overflow(exps);
}

namespace {

// dst[0:2V] = factor·src[0:n] followed by zeros (n <= 2V = kValuePanel): one padded panel row;
// src's exponent fields are folded into exps (before the factor, which may overflow). Whole
// vectors are read with plain loads, a mask only for a partial one (the policy of
// src/ops/vector_loop.hpp).
HWY_INLINE void panel_row(const float* HWY_RESTRICT src, int64_t n, float factor,
                          float* HWY_RESTRICT dst, VU& exps) {
  const DF df;
  const VF f = hn::Set(df, factor);
  auto part = [&](const float* p, int64_t m) {
    if (m >= kLanes) return hn::LoadU(df, p);
    return m > 0 ? hn::MaskedLoad(hn::FirstN(df, size_t(m)), df, p) : hn::Zero(df);
  };
  const VF x0 = part(src, n), x1 = part(src + kLanes, n - kLanes);
  exps = max_exponent(max_exponent(exps, x0), x1);
  hn::Store(hn::Mul(f, x0), df, dst);
  hn::Store(hn::Mul(f, x1), df, dst + kLanes);
}

}  // namespace

bool pack_values(const float* v, int64_t ld, int64_t s, int64_t d, float* vp) {
  VU exps = hn::Zero(DU());
  for (int64_t c0 = 0; c0 < d; c0 += kValuePanel) {
    float* panel = vp + c0 * s;
    const int64_t nc = std::min(kValuePanel, d - c0);
    for (int64_t j = 0; j < s; ++j)
      panel_row(v + j * ld + c0, nc, 1.0f, panel + j * kValuePanel, exps);
  }
  return no_exponent_overflow(exps);
}

void tile_accumulate(const float* p, int64_t rows, const float* vp, int64_t s, int64_t j0,
                     int64_t n, int64_t d, float* o) {
  const int64_t ldo = padded_dim(d);
  for (int64_t c0 = 0; c0 < ldo; c0 += kValuePanel)
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock)
      accumulate_block<kScoreStride, 1>(p + r0 * kScoreStride, n,
                                        vp + (c0 * s + j0 * kValuePanel), o + r0 * ldo + c0, ldo,
                                        int(std::min(kRowBlock, rows - r0)));
}

bool pack_panel_row(const float* x, float factor, int64_t d, float* dst, int64_t panel_stride) {
  VU exps = hn::Zero(DU());
  for (int64_t c0 = 0; c0 < d; c0 += kValuePanel, dst += panel_stride)
    panel_row(x + c0, std::min(kValuePanel, d - c0), factor, dst, exps);
  return no_exponent_overflow(exps);
}

void zero_panel_rows(float* ap, int64_t panel_stride, int64_t r0, int64_t r1, int64_t d) {
  for (int64_t c0 = 0; c0 < d; c0 += kValuePanel, ap += panel_stride)
    std::fill(ap + r0 * kValuePanel, ap + r1 * kValuePanel, 0.0f);
}

void tile_scores_panels(const float* ap, int64_t a_stride, int64_t rows, const float* kp,
                        int64_t n, int64_t d, float* s, int64_t ls) {
  for (int64_t j0 = 0; j0 < n; j0 += kKeyPanel)
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock)
      product_block<kValuePanel, 1, kValuePanel>(ap + r0 * kValuePanel, a_stride, d, kp + j0 * d,
                                                 s + r0 * ls + j0, ls, kMR, false);
}

void tile_accumulate_transposed(const float* p, int64_t m, int64_t k, const float* bp,
                                int64_t b_stride, int64_t d, float* c, int64_t ldc) {
  for (int64_t c0 = 0; c0 < d; c0 += kValuePanel, bp += b_stride)
    for (int64_t m0 = 0; m0 < m; m0 += kRowBlock)
      accumulate_block<1, kBwdScoreStride>(p + m0, k, bp, c + m0 * ldc + c0, ldc,
                                           int(std::min(kRowBlock, m - m0)));
}

void tile_accumulate_rows(const float* p, int64_t rows, const float* bp, int64_t b_stride,
                          int64_t n, int64_t d, float* c, int64_t ldc) {
  for (int64_t c0 = 0; c0 < d; c0 += kValuePanel, bp += b_stride)
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock)
      accumulate_block<kBwdScoreStride, 1>(p + r0 * kBwdScoreStride, n, bp, c + r0 * ldc + c0,
                                           ldc, int(std::min(kRowBlock, rows - r0)));
}

}  // namespace attnkit::flash
