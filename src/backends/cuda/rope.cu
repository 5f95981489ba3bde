// RoPE: one thread per (row, head, rotation pair), with the CPU's operation order (no fused multiply-add).
#include "backends/cuda/rope.cuh"

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/row_math.cuh"

namespace tf::cuda {
namespace {

__global__ void rope_kernel(uint16_t* x, int64_t n_pairs, int n_heads, int half, const int32_t* __restrict__ positions,
                            const float* __restrict__ inverse_frequencies) {
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= n_pairs) return;
  const int i = int(index % half);
  const int64_t row_head = index / half;
  const int64_t row = row_head / n_heads;
  uint16_t* head = x + row_head * 2 * half;
  rotate_pair(bf16_bits_to_f32(head[i]), bf16_bits_to_f32(head[i + half]), positions[row], inverse_frequencies[i],
              head[i], head[i + half]);
}

}  // namespace

void rope_bf16(uint16_t* x, int64_t n_rows, int64_t n_heads, int64_t head_dim, const int32_t* positions,
               const float* inverse_frequencies, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_heads > 0 && head_dim > 0 && head_dim % 2 == 0,
                  "rope_bf16: head_dim must be positive and even");
  if (n_rows == 0) return;
  const int64_t n_pairs = n_rows * n_heads * (head_dim / 2);
  constexpr int kThreads = 256;
  rope_kernel<<<unsigned((n_pairs + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      x, n_pairs, int(n_heads), int(head_dim / 2), positions, inverse_frequencies);
  TF_CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace tf::cuda
