// SwiGLU: one thread per element, silu written as the CPU twin writes it.
#include "backends/cuda/activation.cuh"

#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"

namespace tf::cuda {
namespace {

// Element c of row r reads gate[r * in_stride + c] and up[r * in_stride + c].
__global__ void swiglu_kernel(const uint16_t* gate, const uint16_t* up, int64_t n_rows, int64_t width,
                              int64_t in_stride, uint16_t* out) {
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * width) return;
  const int64_t in = (i / width) * in_stride + i % width;
  const float g = bf16_bits_to_f32(gate[in]);
  const float silu = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  out[i] = f32_to_bf16_bits(__fmul_rn(silu, bf16_bits_to_f32(up[in])));
}

void launch(const uint16_t* gate, const uint16_t* up, int64_t n_rows, int64_t width, int64_t in_stride,
            uint16_t* out, cudaStream_t stream) {
  const int64_t n = n_rows * width;
  if (n == 0) return;
  constexpr int kThreads = 256;
  launch_overlapped("swiglu_kernel", swiglu_kernel, dim3(unsigned((n + kThreads - 1) / kThreads)), dim3(kThreads), 0,
                    stream, gate, up, n_rows, width, in_stride, out);
}

}  // namespace

void swiglu_bf16(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n >= 0, "swiglu_bf16: negative size");
  launch(gate, up, 1, n, n, out, stream);
}

void swiglu_fused_bf16(const uint16_t* gate_up, int64_t n_rows, int64_t width, uint16_t* out, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && width > 0, "swiglu_fused_bf16: bad shape");
  launch(gate_up, gate_up + width, n_rows, width, 2 * width, out, stream);
}

}  // namespace tf::cuda
