// SwiGLU: one thread per element, silu written as the CPU twin writes it.
#include "backends/cuda/activation.cuh"

#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

__global__ void swiglu_kernel(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = bf16_bits_to_f32(gate[i]);
  const float silu = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  out[i] = f32_to_bf16_bits(__fmul_rn(silu, bf16_bits_to_f32(up[i])));
}

}  // namespace

void swiglu_bf16(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n >= 0, "swiglu_bf16: negative size");
  if (n == 0) return;
  constexpr int kThreads = 256;
  swiglu_kernel<<<unsigned((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(gate, up, n, out);
  TF_CUDA_CHECK_LAUNCH("swiglu_kernel");
}

}  // namespace tf::cuda
