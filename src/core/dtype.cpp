// Element-type table and f16/bf16 rounding conversions (IEEE 754 round-to-nearest-even).
#include "attnkit/core/dtype.hpp"

#include <array>
#include <bit>

namespace attnkit {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 15> kTable = {{
    {DType::f64, "F64", 8},      {DType::f32, "F32", 4},         {DType::f16, "F16", 2},
    {DType::bf16, "BF16", 2},    {DType::f8_e4m3, "F8_E4M3", 1}, {DType::f8_e5m2, "F8_E5M2", 1},
    {DType::i64, "I64", 8},      {DType::i32, "I32", 4},         {DType::i16, "I16", 2},
    {DType::i8, "I8", 1},        {DType::u64, "U64", 8},         {DType::u32, "U32", 4},
    {DType::u16, "U16", 2},      {DType::u8, "U8", 1},           {DType::boolean, "BOOL", 1},
}};
}  // namespace

size_t dtype_size(DType t) { return kTable[size_t(t)].size; }
std::string_view dtype_name(DType t) { return kTable[size_t(t)].name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& e : kTable)
    if (e.name == name) return e.type;
  return std::nullopt;
}

uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs >= 0x38800000u) {                                 // normal half
    const uint32_t mant_odd = (abs >> 13) & 1u;
    const uint32_t rounded = abs + 0xfffu + mant_odd;        // ties to even on bit 13
    return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
  }
  if (abs < 0x33000000u) return uint16_t(sign);  // below half of the smallest subnormal: ±0
  // Subnormal half: value = m · 2^-24 with m in [1, 1023]; round abs·2^24 to an integer, ties even.
  const uint32_t exp = abs >> 23;
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exp;  // 14..24 bits dropped
  const uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  return uint16_t(sign | r);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float v = float(mant) * 0x1p-24f;  // exact: mant < 2^10
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace attnkit
