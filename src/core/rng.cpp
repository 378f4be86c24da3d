// Philox4x32 with 10 rounds; constants from Random123 (Salmon, Moraes, Dror, Shaw, SC'11).
#include "attnkit/core/rng.hpp"

#include "hwy/highway.h"

namespace attnkit {
namespace hn = hwy::HWY_NAMESPACE;
namespace {
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (Weyl) increments
}  // namespace

std::array<uint32_t, 4> philox4x32(uint64_t key, std::array<uint32_t, 4> c) {
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * c[0];
    const uint64_t p1 = uint64_t(kM1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k1,
         uint32_t(p0)};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// philox4x32 of one vector of counters {j0 + l, i, head, seq} (l = lane), the rounds on whole
// vectors: a 32×32→64-bit product per lane is MulEven on the even lanes and on the odd lanes
// shifted down (vpmuludq). Word 0 of each result decides one key, as in dropout_keep.
void dropout_keep_factors(uint64_t seed, float p, float keep_scale, uint32_t seq, uint32_t head,
                          uint32_t i, uint32_t j0, int64_t n, float* factors) {
  const hn::ScalableTag<uint32_t> d;
  const hn::Repartition<uint64_t, decltype(d)> d64;
  const hn::Rebind<float, decltype(d)> df;
  const hn::RebindToSigned<decltype(d)> di;
  using V = hn::Vec<decltype(d)>;
  const auto mul_hi_lo = [&](V a, V m, V& hi, V& lo) {  // hi, lo = the two halves of m·a
    const auto even = hn::MulEven(a, m);
    const auto odd = hn::MulEven(hn::BitCast(d, hn::ShiftRight<32>(hn::BitCast(d64, a))), m);
    hi = hn::OddEven(hn::BitCast(d, odd), hn::BitCast(d, hn::ShiftRight<32>(even)));
    lo = hn::OddEven(hn::BitCast(d, hn::ShiftLeft<32>(odd)), hn::BitCast(d, even));
  };
  const int64_t lanes = int64_t(hn::Lanes(d));
  const V m0 = hn::Set(d, kM0), m1 = hn::Set(d, kM1);
  const auto threshold = hn::Set(df, p), keep = hn::Set(df, keep_scale), zero = hn::Zero(df);
  for (int64_t base = 0; base < n; base += lanes) {
    V c0 = hn::Add(hn::Set(d, j0 + uint32_t(base)), hn::Iota(d, 0)), c1 = hn::Set(d, i);
    V c2 = hn::Set(d, head), c3 = hn::Set(d, seq);
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      V hi0, lo0, hi1, lo1;
      mul_hi_lo(c0, m0, hi0, lo0);
      mul_hi_lo(c2, m1, hi1, lo1);
      c0 = hn::Xor(hn::Xor(hi1, c1), hn::Set(d, k0));
      c2 = hn::Xor(hn::Xor(hi0, c3), hn::Set(d, k1));
      c1 = lo1;
      c3 = lo0;
      k0 += kW0;
      k1 += kW1;
    }
    // uniform_from_bits: float(bits >> 8)·2⁻²⁴, exact (24-bit integers convert exactly).
    const auto u = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, hn::ShiftRight<8>(c0))), hn::Set(df, 0x1p-24f));
    const auto f = hn::IfThenElse(hn::Ge(u, threshold), keep, zero);
    hn::BlendedStore(f, hn::FirstN(df, size_t(n - base)), df, factors + base);
  }
}

}  // namespace attnkit
