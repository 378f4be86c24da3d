// Philox4x32 with 10 rounds; constants from Random123 (Salmon, Moraes, Dror, Shaw, SC'11).
#include "attnkit/core/rng.hpp"

namespace attnkit {

std::array<uint32_t, 4> philox4x32(uint64_t key, std::array<uint32_t, 4> c) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
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

}  // namespace attnkit
