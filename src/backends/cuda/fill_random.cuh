// Pseudo-random bf16 fill on the GPU, for synthetic weights: speed does not depend on the values,
// and generating them in place keeps gigabytes of weights off the host.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// out[i] = bf16(scale * u_i), u_i uniform in [-1, 1) from a hash of (seed, i); the same seed gives
// the same values on any GPU.
void fill_random_bf16(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
