// RMSNorm per row on the GPU, alone or fused with the residual add before it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * gain, computed in f32 and rounded to bf16 once.
// x, y: [n_rows][dim] bf16 bits (y may alias x), gain: [dim] bf16 bits; dim % 8 == 0, 16-byte aligned.
void rms_norm_bf16(const uint16_t* x, int64_t n_rows, int64_t dim, const uint16_t* gain, float eps,
                   uint16_t* y, cudaStream_t stream = nullptr);

// hidden += residual (rounded to bf16, as add_bf16), then normed = rms_norm(hidden) (as
// rms_norm_bf16), in one kernel. residual may be null: normed = rms_norm(hidden) alone.
void add_rms_norm_bf16(uint16_t* hidden, const uint16_t* residual, int64_t n_rows, int64_t dim, const uint16_t* gain,
                       float eps, uint16_t* normed, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
