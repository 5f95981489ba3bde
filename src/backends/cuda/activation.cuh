// SwiGLU on the GPU: out = silu(gate) * up, elementwise.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// gate, up, out: [n] bf16 bits (out may alias gate or up); computed in f32, rounded once.
void swiglu_bf16(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out, cudaStream_t stream = nullptr);

// The same over a fused gate/up linear's output: gate_up [n_rows][2 * width] bf16 bits, each row
// its gate half then its up half; out: [n_rows][width].
void swiglu_fused_bf16(const uint16_t* gate_up, int64_t n_rows, int64_t width, uint16_t* out,
                       cudaStream_t stream = nullptr);

}  // namespace tf::cuda
