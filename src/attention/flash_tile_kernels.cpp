// The flash forward's packed tile products (flash_tile_kernels.hpp) on Highway's static target:
// packing of Q, Kᵀ and V, and two register-blocked micro-kernels, MR rows × 2 vectors each.
//   scores:  for each key panel, for each row block: for e < D: load 2 vectors of Kᵀ[e, panel],
//            broadcast Q[r, e] for the MR rows, 2·MR FMAs.
//   values:  for each D panel, for each row block: for j < n: load 2 vectors of V[j, panel],
//            broadcast P[r, j] for the MR rows, 2·MR FMAs.
// The key panel (D × NK floats, 16 KiB at D = 128 on AVX-512) stays in L1 while the row blocks
// stream past it; the V panel of a key tile (n × NV floats) is read once per row block.
#include "flash_tile_kernels.hpp"

#include <algorithm>

#include "hwy/highway.h"

#ifndef HWY_UNROLL_ALL
#define HWY_UNROLL_ALL _Pragma("GCC unroll 16")
#endif

namespace attnkit::flash {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

constexpr int kMR = int(kRowBlock);
static_assert(hn::MaxLanes(DF()) == size_t(kLanes), "kLanes must match Highway's static target");

// s[r, 0:NK] = Σ_e qp[e, r]·kp[e, 0:NK] for the MR rows of one row block (s row stride ls).
HWY_INLINE void score_block(const float* HWY_RESTRICT qp, const float* HWY_RESTRICT kp, int64_t d,
                            float* HWY_RESTRICT s, int64_t ls) {
  const DF df;
  VF a0[kMR], a1[kMR];
  HWY_UNROLL_ALL for (int r = 0; r < kMR; ++r) a0[r] = a1[r] = hn::Zero(df);
  for (int64_t e = 0; e < d; ++e, qp += kMR, kp += kKeyPanel) {
    const VF k0 = hn::Load(df, kp), k1 = hn::Load(df, kp + kLanes);
    HWY_UNROLL_ALL for (int r = 0; r < kMR; ++r) {
      const VF q = hn::Set(df, qp[r]);
      a0[r] = hn::MulAdd(q, k0, a0[r]);
      a1[r] = hn::MulAdd(q, k1, a1[r]);
    }
  }
  HWY_UNROLL_ALL for (int r = 0; r < kMR; ++r) {
    hn::Store(a0[r], df, s + r * ls);
    hn::Store(a1[r], df, s + r * ls + kLanes);
  }
}

// o[r, 0:NV] += Σ_j p[r, j]·vp[j, 0:NV] for the first mr of the MR rows of one row block (p row
// stride kScoreStride, o row stride ldo).
HWY_INLINE void value_block(const float* HWY_RESTRICT p, const float* HWY_RESTRICT vp, int64_t n,
                            float* HWY_RESTRICT o, int64_t ldo, int mr) {
  const DF df;
  VF a0[kMR], a1[kMR];
  HWY_UNROLL_ALL for (int r = 0; r < kMR; ++r) {
    a0[r] = r < mr ? hn::Load(df, o + r * ldo) : hn::Zero(df);
    a1[r] = r < mr ? hn::Load(df, o + r * ldo + kLanes) : hn::Zero(df);
  }
  for (int64_t j = 0; j < n; ++j, vp += kValuePanel) {
    const VF v0 = hn::Load(df, vp), v1 = hn::Load(df, vp + kLanes);
    HWY_UNROLL_ALL for (int r = 0; r < kMR; ++r) {
      const VF x = hn::Set(df, p[r * kScoreStride + j]);
      a0[r] = hn::MulAdd(x, v0, a0[r]);
      a1[r] = hn::MulAdd(x, v1, a1[r]);
    }
  }
  HWY_UNROLL_ALL for (int r = 0; r < kMR; ++r) {
    if (r >= mr) break;
    hn::Store(a0[r], df, o + r * ldo);
    hn::Store(a1[r], df, o + r * ldo + kLanes);
  }
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
    std::fill(buf, buf + kLanes, kFloor * 2 + m);
    std::copy(x + j, x + n, buf);
    const VF e = one(hn::Load(df, buf));
    hn::Store(e, df, buf);
    std::copy(buf, buf + (n - j), x + j);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(df, sum));
}

void pack_keys(const float* k, int64_t ld, int64_t s, int64_t d, float* kp) {
  // Row by row: each K row is read contiguously (rows are often 4 KiB apart, so reading one
  // element of NK rows at a time would put them all in one L1 set); the panel (D × NK floats)
  // stays in L1 while it is written.
  for (int64_t p0 = 0; p0 < s; p0 += kKeyPanel) {
    float* panel = kp + p0 * d;
    const int64_t nk = std::min(kKeyPanel, s - p0);
    for (int64_t j = 0; j < kKeyPanel; ++j)
      if (j < nk)
        for (int64_t e = 0; e < d; ++e) panel[e * kKeyPanel + j] = k[(p0 + j) * ld + e];
      else
        for (int64_t e = 0; e < d; ++e) panel[e * kKeyPanel + j] = 0.0f;
  }
}

void pack_values(const float* v, int64_t ld, int64_t s, int64_t d, float* vp) {
  for (int64_t c0 = 0; c0 < d; c0 += kValuePanel) {
    float* panel = vp + c0 * s;
    const int64_t nc = std::min(kValuePanel, d - c0);
    for (int64_t j = 0; j < s; ++j) {
      float* dst = panel + j * kValuePanel;
      std::copy_n(v + j * ld + c0, nc, dst);
      std::fill(dst + nc, dst + kValuePanel, 0.0f);
    }
  }
}

void pack_queries(const float* q, int64_t rows, int64_t d, float* qp) {
  for (int64_t b0 = 0; b0 < rows; b0 += kRowBlock) {
    float* block = qp + b0 * d;
    const int64_t nr = std::min(kRowBlock, rows - b0);
    const float* src = q + b0 * d;
    for (int64_t e = 0; e < d; ++e) {
      float* dst = block + e * kRowBlock;
      for (int64_t r = 0; r < nr; ++r) dst[r] = src[r * d + e];
      for (int64_t r = nr; r < kRowBlock; ++r) dst[r] = 0.0f;
    }
  }
}

void tile_scores(const float* qp, int64_t rows, const float* kp, int64_t n, int64_t d, float* s,
                 int64_t ls) {
  for (int64_t j0 = 0; j0 < n; j0 += kKeyPanel)
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock)
      score_block(qp + r0 * d, kp + j0 * d, d, s + r0 * ls + j0, ls);
}

void tile_accumulate(const float* p, int64_t rows, const float* vp, int64_t s, int64_t j0,
                     int64_t n, int64_t d, float* o) {
  const int64_t ldo = padded_dim(d);
  for (int64_t c0 = 0; c0 < ldo; c0 += kValuePanel)
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock)
      value_block(p + r0 * kScoreStride, vp + (c0 * s + j0 * kValuePanel), n, o + r0 * ldo + c0,
                  ldo, int(std::min(kRowBlock, rows - r0)));
}

}  // namespace attnkit::flash
