// bf16 bit patterns to and from f32 on the device; storage stays uint16_t as on the CPU side.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace tf::cuda {

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }

// Round to nearest even, as the CPU's f32_to_bf16 and PyTorch do.
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

// The 8 bf16 values of a 16-byte load, as f32.
__device__ __forceinline__ void unpack_bf16x8(const uint4& v, float (&out)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 pack_bf16x8(const float (&in)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    words[i] = uint32_t(f32_to_bf16_bits(in[2 * i])) | (uint32_t(f32_to_bf16_bits(in[2 * i + 1])) << 16);
  return make_uint4(words[0], words[1], words[2], words[3]);
}

}  // namespace tf::cuda
