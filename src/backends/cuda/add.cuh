// Elementwise addition on the GPU (the residual stream): out = a + b.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// a, b, out: [n] bf16 bits (out may alias a or b); added in f32 and rounded to bf16 once, as a
// bf16 PyTorch model adds its residual.
void add_bf16(const uint16_t* a, const uint16_t* b, int64_t n, uint16_t* out, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
