// SwiGLU: one thread per element, silu written as the CPU twin writes it (row_math.cuh; the linear
// kernel's SwiGLU output computes the same).
#include "backends/cuda/activation.cuh"

#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"
#include "backends/cuda/row_math.cuh"

namespace tf::cuda {
namespace {

__global__ void swiglu_kernel(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out) {
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = f32_to_bf16_bits(swiglu_of(bf16_bits_to_f32(gate[i]), bf16_bits_to_f32(up[i])));
}

__global__ void sigmoid_gate_kernel(uint16_t* x, int64_t n_rows, int64_t n_heads, int64_t head_dim,
                                    const uint16_t* gates, int64_t gate_row_stride, int64_t gate_head_stride) {
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * n_heads * head_dim) return;
  const int64_t row = i / (n_heads * head_dim), head = (i / head_dim) % n_heads, d = i % head_dim;
  const float gate = bf16_bits_to_f32(gates[row * gate_row_stride + head * gate_head_stride + d]);
  const float sigmoid = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gate)));
  x[i] = f32_to_bf16_bits(__fmul_rn(bf16_bits_to_f32(x[i]), sigmoid));
}

}  // namespace

void sigmoid_gate_bf16(uint16_t* x, int64_t n_rows, int64_t n_heads, int64_t head_dim, const uint16_t* gates,
                       int64_t gate_row_stride, int64_t gate_head_stride, cudaStream_t stream) {
  const int64_t n = n_rows * n_heads * head_dim;
  TF_CUDA_REQUIRE(n >= 0, "sigmoid_gate_bf16: negative size");
  if (n == 0) return;
  constexpr int kThreads = 256;
  launch_overlapped("sigmoid_gate_kernel", sigmoid_gate_kernel, dim3(unsigned((n + kThreads - 1) / kThreads)),
                    dim3(kThreads), 0, stream, x, n_rows, n_heads, head_dim, gates, gate_row_stride, gate_head_stride);
}

void swiglu_bf16(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n >= 0, "swiglu_bf16: negative size");
  if (n == 0) return;
  constexpr int kThreads = 256;
  launch_overlapped("swiglu_kernel", swiglu_kernel, dim3(unsigned((n + kThreads - 1) / kThreads)), dim3(kThreads), 0,
                    stream, gate, up, n, out);
}

}  // namespace tf::cuda
