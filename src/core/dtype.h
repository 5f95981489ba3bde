// Element types of stored tensors and the conversions the kernels use.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace tf {

enum class DType : uint8_t { f32, f16, bf16, u32, i32, i64, u8, i8, u16, i16, f64, boolean };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
// Parses a safetensors dtype name ("BF16", "F32", ...); returns false when unknown.
bool dtype_from_safetensors(const std::string& name, DType* out);
const char* dtype_safetensors_name(DType dtype);

inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, the rounding PyTorch uses; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// Inline, so kernels that read f16 scales keep their vector registers (a call clobbers them all).
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do {
        e++;
        mantissa <<= 1;
      } while ((mantissa & 0x400) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mantissa & 0x3ff) << 13;
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f);

// Reads element i of a float-like array of the given dtype (f32, f16, bf16) as f32.
inline float load_as_f32(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    default: return static_cast<const float*>(data)[i];
  }
}

}  // namespace tf
