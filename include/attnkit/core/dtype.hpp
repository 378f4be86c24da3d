#pragma once
// Element types and the f16/bf16 conversions (round to nearest, ties to even; NaN stays NaN).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace attnkit {

// Every element type a safetensors file may hold; f32/f16/bf16/i8 are the compute/storage types.
enum class DType : uint8_t {
  f64, f32, f16, bf16, f8_e4m3, f8_e5m2, i64, i32, i16, i8, u64, u32, u16, u8, boolean,
};

// Size of one element in bytes.
size_t dtype_size(DType t);
// The safetensors spelling ("F32", "BF16", ...).
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string; nullopt if unknown.
std::optional<DType> parse_dtype(std::string_view name);

// Bit pattern of an IEEE binary16 value nearest to f (ties to even, overflow to inf).
uint16_t f32_to_f16(float f);
// Exact float value of an IEEE binary16 bit pattern.
float f16_to_f32(uint16_t h);
// Bit pattern of the bfloat16 value nearest to f (ties to even; NaN stays a quiet NaN). Inline:
// the bf16 cache writes and gemm_bf16 convert whole operands with it.
inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  return uint16_t((x + 0x7fffu + lsb) >> 16);
}
// Exact float value of a bfloat16 bit pattern.
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace attnkit
