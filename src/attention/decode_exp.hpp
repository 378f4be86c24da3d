#pragma once
// The exponential of the wide-group kernels' fused softmax pass (decode_wide.cpp) and the
// constants of its lagged reference max. Internal header for Highway translation units.
#include "decode_highway.hpp"

namespace attnkit::decode {

// As exp_sub_sum, probabilities below e^-64 of the max become 0 in the three-pass softmax; the
// fused pass clamps them to e^-64 of their reference max (nothing next to a sum of at least 1).
inline constexpr float kExpFloor = -64.0f;
// The fused pass lets P reach e^kLag before raising a row's reference max.
inline constexpr float kLag = 8.0f;

// exp(z) for z in [kExpFloor, kLag + 1] (callers clamp below): n = round(z / ln 2), r = z - n·ln 2
// in two parts (|r| ≤ ln 2 / 2), e^r from Highway's degree-7 polynomial for Exp, times 2^n
// (AVX-512 `vscalefps`; else built in the exponent bits, n + 127 being a normal exponent in this
// range). Same reduction and polynomial as hn::Exp, without its range handling: 13–16 vector
// operations instead of about 24.
HWY_INLINE VF exp_clamped(VF z) {
  const DF df;
  const VF n = hn::Round(hn::Mul(z, hn::Set(df, 1.44269504088896341f)));
  VF r = hn::MulAdd(n, hn::Set(df, -0.693145751953125f), z);
  r = hn::MulAdd(n, hn::Set(df, -1.428606765330187045e-6f), r);
  VF p = hn::MulAdd(hn::Set(df, 0.000198527617612853646278381f), r, hn::Set(df, 0.00139304355252534151077271f));
  p = hn::MulAdd(p, r, hn::Set(df, 0.00833336077630519866943359f));
  p = hn::MulAdd(p, r, hn::Set(df, 0.0416664853692054748535156f));
  p = hn::MulAdd(p, r, hn::Set(df, 0.166666671633720397949219f));
  p = hn::MulAdd(p, r, hn::Set(df, 0.5f));
  p = hn::Add(hn::MulAdd(p, hn::Mul(r, r), r), hn::Set(df, 1.0f));
#if HWY_TARGET <= HWY_AVX3
  return VF{_mm512_scalef_ps(p.raw, n.raw)};  // p·2^n in one instruction
#else
  const hn::RebindToSigned<DF> di;
  const auto scale = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::Mul(p, hn::BitCast(df, scale));
#endif
}

}  // namespace attnkit::decode
