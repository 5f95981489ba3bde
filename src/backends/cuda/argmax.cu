// Argmax: one block per row; (value, id) pairs are reduced under a total order, so the result is
// the same whatever the reduction shape.
#include "backends/cuda/argmax.cuh"

#include <cmath>

#include "backends/cuda/block_argmax.cuh"
#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;

__global__ void argmax_kernel(const float* __restrict__ logits, int n_vocab, int32_t* __restrict__ ids) {
  __shared__ float warp_values[kThreads / 32];
  __shared__ int warp_ids[kThreads / 32];
  const float* row = logits + int64_t(blockIdx.x) * n_vocab;
  // n_vocab stands for "nothing above -inf yet"; strict > skips NaN and -inf.
  float best_value = -INFINITY;
  int best_id = n_vocab;
  for (int id = int(threadIdx.x); id < n_vocab; id += kThreads) {
    const float value = row[id];
    if (value > best_value) {
      best_value = value;
      best_id = id;
    }
  }
  block_argmax<kThreads>(&best_value, &best_id, warp_values, warp_ids);
  if (threadIdx.x == 0) ids[blockIdx.x] = best_id == n_vocab ? 0 : best_id;
}

}  // namespace

void argmax_f32(const float* logits, int64_t n_rows, int64_t n_vocab, int32_t* ids, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_vocab > 0 && n_vocab < (int64_t(1) << 31), "argmax_f32: bad vocabulary size");
  if (n_rows == 0) return;
  argmax_kernel<<<unsigned(n_rows), kThreads, 0, stream>>>(logits, int(n_vocab), ids);
  TF_CUDA_CHECK_LAUNCH("argmax_kernel");
}

}  // namespace tf::cuda
