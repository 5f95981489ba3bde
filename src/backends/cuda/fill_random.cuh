// Pseudo-random bf16 fill on the GPU, for synthetic weights: speed does not depend on the values,
// and generating them in place keeps gigabytes of weights off the host.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// out[i] = bf16(center + scale * u_i), u_i uniform in [-1, 1) from a hash of (seed, i); the same seed
// gives the same values on any GPU.
void fill_random_bf16(uint16_t* out, int64_t n, uint64_t seed, float scale, float center = 0.0f,
                      cudaStream_t stream = nullptr);

// out[i] = 32 random bits from the same hash: packed quantized weights.
void fill_random_u32(uint32_t* out, int64_t n, uint64_t seed, cudaStream_t stream = nullptr);

// Interleaved MLX scale and bias pairs (pack_scale_bias) for random codes of `bits`: scale about
// 0.04 / 2^bits and bias about -0.02 (each +-1%), so the entries spread over about +-0.02; the scale
// stored as the kernels read it (gpu_scale_exponent in affine_layout.h).
void fill_random_scale_bias(uint32_t* out, int64_t n, uint64_t seed, int bits, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
