// Top-k with softmax probabilities: one block per row; k passes of a (value, id) argmax that skips
// the ids already chosen, then one sum of exp(logit - max) in a fixed order (threads stride the row,
// warps and then warp totals are added in the same order on every run).
#include "backends/cuda/top_k.cuh"

#include <cmath>

#include "backends/cuda/block_argmax.cuh"
#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

__global__ void top_k_softmax_kernel(const float* __restrict__ logits, int n_vocab, int k, int32_t* __restrict__ ids,
                                     float* __restrict__ probabilities) {
  __shared__ float warp_values[kWarps];
  __shared__ int warp_ids[kWarps];
  __shared__ float warp_sums[kWarps];
  __shared__ int chosen[kMaxTopK];
  __shared__ float chosen_values[kMaxTopK];
  const float* row = logits + int64_t(blockIdx.x) * n_vocab;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  for (int pick = 0; pick < k; ++pick) {
    // n_vocab stands for "nothing above -inf left"; strict > skips NaN and -inf.
    float best_value = -INFINITY;
    int best_id = n_vocab;
    for (int id = int(threadIdx.x); id < n_vocab; id += kThreads) {
      bool taken = false;
      for (int c = 0; c < pick; ++c) taken |= chosen[c] == id;
      const float value = row[id];
      if (!taken && value > best_value) {
        best_value = value;
        best_id = id;
      }
    }
    block_argmax<kThreads>(&best_value, &best_id, warp_values, warp_ids);
    if (threadIdx.x == 0) {
      chosen[pick] = best_id;
      chosen_values[pick] = best_value;
    }
    __syncthreads();
  }
  const float max_logit = chosen_values[0];
  float sum = 0.0f;
  if (chosen[0] != n_vocab)
    for (int id = int(threadIdx.x); id < n_vocab; id += kThreads) {
      const float value = row[id];
      if (value > -INFINITY) sum += expf(value - max_logit);  // NaN fails the test too
    }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += warp_sums[w];
    for (int pick = 0; pick < k; ++pick) {
      const bool found = chosen[pick] != n_vocab;
      ids[int64_t(blockIdx.x) * k + pick] = found ? chosen[pick] : 0;
      probabilities[int64_t(blockIdx.x) * k + pick] = found ? expf(chosen_values[pick] - max_logit) / total : 0.0f;
    }
  }
}

}  // namespace

void top_k_softmax_f32(const float* logits, int64_t n_rows, int64_t n_vocab, int k, int32_t* ids, float* probabilities,
                       cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_vocab > 0 && n_vocab < (int64_t(1) << 31), "top_k_softmax_f32: bad vocabulary size");
  TF_CUDA_REQUIRE(k >= 1 && k <= kMaxTopK && k <= n_vocab, "top_k_softmax_f32: k must be in 1..64 and at most n_vocab");
  if (n_rows == 0) return;
  top_k_softmax_kernel<<<unsigned(n_rows), kThreads, 0, stream>>>(logits, int(n_vocab), k, ids, probabilities);
  TF_CUDA_CHECK_LAUNCH("top_k_softmax_kernel");
}

}  // namespace tf::cuda
