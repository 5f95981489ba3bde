// Activations on the GPU: SwiGLU (out = silu(gate) * up) and the gated attention's sigmoid output gate.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

// gate, up, out: [n] bf16 bits (out may alias gate or up); computed in f32, rounded once. The model
// runs it inside its gate/up linear instead (LinearOutput::swiglu_bf16), with the same arithmetic.
void swiglu_bf16(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out, cudaStream_t stream = nullptr);

// A gated attention's output gate, in place: x[r][h][i] *= sigmoid(gates[r * gate_row_stride +
// h * gate_head_stride + i]) for x [n_rows][n_heads][head_dim] bf16 bits; in f32, rounded once.
void sigmoid_gate_bf16(uint16_t* x, int64_t n_rows, int64_t n_heads, int64_t head_dim, const uint16_t* gates,
                       int64_t gate_row_stride, int64_t gate_head_stride, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
