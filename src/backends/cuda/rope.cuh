// Rotary position embedding on the GPU (rotate-half form), the same angles as the CPU (models/rope_frequencies.h).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// Rotates x: [n_rows][n_heads][head_dim] bf16 bits in place; row r is at positions[r] (device).
// inverse_frequencies: [head_dim/2] f32 on the device, from rope_inverse_frequencies, so both
// backends start from the same numbers. Computed in f32, rounded to bf16 once.
void rope_bf16(uint16_t* x, int64_t n_rows, int64_t n_heads, int64_t head_dim, const int32_t* positions,
               const float* inverse_frequencies, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
