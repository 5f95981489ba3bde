// Residual addition: one thread per element.
#include "backends/cuda/add.cuh"

#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"

namespace tf::cuda {
namespace {

__global__ void add_kernel(const uint16_t* a, const uint16_t* b, int64_t n, uint16_t* out) {
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = f32_to_bf16_bits(__fadd_rn(bf16_bits_to_f32(a[i]), bf16_bits_to_f32(b[i])));
}

}  // namespace

void add_bf16(const uint16_t* a, const uint16_t* b, int64_t n, uint16_t* out, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n >= 0, "add_bf16: negative size");
  if (n == 0) return;
  constexpr int kThreads = 256;
  launch_overlapped("add_kernel", add_kernel, dim3(unsigned((n + kThreads - 1) / kThreads)), dim3(kThreads), 0, stream,
                    a, b, n, out);
}

}  // namespace tf::cuda
