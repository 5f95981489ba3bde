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

}  // namespace

void swiglu_bf16(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n >= 0, "swiglu_bf16: negative size");
  if (n == 0) return;
  constexpr int kThreads = 256;
  launch_overlapped("swiglu_kernel", swiglu_kernel, dim3(unsigned((n + kThreads - 1) / kThreads)), dim3(kThreads), 0,
                    stream, gate, up, n, out);
}

}  // namespace tf::cuda
