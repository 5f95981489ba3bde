#include "core/dtype.h"

namespace tf {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::u32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: case DType::u16: case DType::i16: return 2;
    case DType::u8: case DType::i8: case DType::boolean: return 1;
  }
  return 0;
}

namespace {
struct DTypeName {
  DType dtype;
  const char* safetensors;
  const char* lower;
};
constexpr DTypeName kNames[] = {
    {DType::f32, "F32", "f32"},   {DType::f16, "F16", "f16"},   {DType::bf16, "BF16", "bf16"},
    {DType::u32, "U32", "u32"},   {DType::i32, "I32", "i32"},   {DType::i64, "I64", "i64"},
    {DType::u8, "U8", "u8"},      {DType::i8, "I8", "i8"},      {DType::u16, "U16", "u16"},
    {DType::i16, "I16", "i16"},   {DType::f64, "F64", "f64"},   {DType::boolean, "BOOL", "bool"},
};
}  // namespace

const char* dtype_name(DType dtype) {
  for (const auto& n : kNames)
    if (n.dtype == dtype) return n.lower;
  return "?";
}

const char* dtype_safetensors_name(DType dtype) {
  for (const auto& n : kNames)
    if (n.dtype == dtype) return n.safetensors;
  return "?";
}

bool dtype_from_safetensors(const std::string& name, DType* out) {
  for (const auto& n : kNames)
    if (name == n.safetensors) {
      *out = n.dtype;
      return true;
    }
  return false;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int32_t exponent = int32_t((u >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = u & 0x7fffff;
  if (((u >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (mantissa ? 0x200 : 0));
  if (exponent >= 31) return uint16_t(sign | 0x7c00);
  if (exponent <= 0) {
    if (exponent < -10) return uint16_t(sign);
    mantissa |= 0x800000;
    uint32_t shift = uint32_t(14 - exponent);
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) half++;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | uint32_t(exponent) << 10 | mantissa >> 13;
  uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) half++;
  return uint16_t(half);
}

}  // namespace tf
