// Argmax: one block per row; (value, id) pairs are reduced under a total order, so the result is
// the same whatever the reduction shape.
#include "backends/cuda/argmax.cuh"

#include <cmath>

#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;

// True when (value, id) beats (best_value, best_id): larger value, or equal value and lower id.
__device__ __forceinline__ bool beats(float value, int id, float best_value, int best_id) {
  return value > best_value || (value == best_value && id < best_id);
}

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
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_value = __shfl_xor_sync(0xffffffffu, best_value, offset);
    const int other_id = __shfl_xor_sync(0xffffffffu, best_id, offset);
    if (beats(other_value, other_id, best_value, best_id)) {
      best_value = other_value;
      best_id = other_id;
    }
  }
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  if (lane == 0) {
    warp_values[warp] = best_value;
    warp_ids[warp] = best_id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w)
      if (beats(warp_values[w], warp_ids[w], best_value, best_id)) {
        best_value = warp_values[w];
        best_id = warp_ids[w];
      }
    ids[blockIdx.x] = best_id == n_vocab ? 0 : best_id;
  }
}

}  // namespace

void argmax_f32(const float* logits, int64_t n_rows, int64_t n_vocab, int32_t* ids, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_vocab > 0 && n_vocab < (int64_t(1) << 31), "argmax_f32: bad vocabulary size");
  if (n_rows == 0) return;
  argmax_kernel<<<unsigned(n_rows), kThreads, 0, stream>>>(logits, int(n_vocab), ids);
  TF_CUDA_CHECK_LAUNCH("argmax_kernel");
}

}  // namespace tf::cuda
