// SwiGLU on the GPU: out = silu(gate) * up, elementwise.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// gate, up, out: [n] bf16 bits (out may alias gate or up); computed in f32, rounded once. The model
// runs it inside its gate/up linear instead (LinearOutput::swiglu_bf16), with the same arithmetic.
void swiglu_bf16(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
