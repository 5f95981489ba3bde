// Per-row device math shared by the standalone kernels and their fused forms, so a fused kernel
// computes every value with the same operations in the same order (and so the same bits).
#pragma once
#include <cstdint>

#include "backends/cuda/bf16_math.cuh"

namespace tf::cuda {

// One warp normalizes one row: lane l owns the 8-element pieces l, l+32, l+64, ... The sum of
// squares runs over a lane's pieces in order, then a butterfly gives every lane the same sum
// (IEEE addition commutes); none of it depends on other rows.
__device__ __forceinline__ float warp_inverse_rms(const uint16_t* row, int dim, float eps, int lane) {
  float sum_of_squares = 0.0f;
  for (int piece = lane; piece < dim / 8; piece += 32) {
    float v[8];
    unpack_bf16x8(*reinterpret_cast<const uint4*>(row + 8 * piece), v);
#pragma unroll
    for (int i = 0; i < 8; ++i) sum_of_squares = __fadd_rn(sum_of_squares, __fmul_rn(v[i], v[i]));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    sum_of_squares = sum_of_squares + __shfl_xor_sync(0xffffffffu, sum_of_squares, offset);
  return 1.0f / sqrtf(sum_of_squares / float(dim) + eps);
}

// Piece `piece` of a normalized row, as f32 values already rounded to bf16. Hugging Face order:
// normalize first, then multiply by the gain.
__device__ __forceinline__ void normalized_piece(const uint16_t* row, const uint16_t* gain, float inverse_rms, int piece,
                                                 float (&out)[8]) {
  float gains[8];
  unpack_bf16x8(*reinterpret_cast<const uint4*>(row + 8 * piece), out);
  unpack_bf16x8(*reinterpret_cast<const uint4*>(gain + 8 * piece), gains);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = bf16_bits_to_f32(f32_to_bf16_bits(__fmul_rn(__fmul_rn(out[i], inverse_rms), gains[i])));
}

// RoPE on one rotation pair with the CPU's operation order (no fused multiply-add); the angle is
// formed once, as on the CPU: position * inverse frequency in f32. Results rounded to bf16.
__device__ __forceinline__ void rotate_pair(float first, float second, int32_t position, float inverse_frequency,
                                            uint16_t& out_first, uint16_t& out_second) {
  const float angle = __fmul_rn(float(position), inverse_frequency);
  float s, c;
  sincosf(angle, &s, &c);
  out_first = f32_to_bf16_bits(__fsub_rn(__fmul_rn(first, c), __fmul_rn(second, s)));
  out_second = f32_to_bf16_bits(__fadd_rn(__fmul_rn(second, c), __fmul_rn(first, s)));
}

// silu(gate) * up in f32, as the CPU twin writes it; the caller rounds it to bf16 once.
__device__ __forceinline__ float swiglu_of(float gate, float up) {
  const float silu = __fdiv_rn(gate, __fadd_rn(1.0f, expf(-gate)));
  return __fmul_rn(silu, up);
}

}  // namespace tf::cuda
