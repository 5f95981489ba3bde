// The (value, id) argmax of a thread block, under a total order (larger value, then lower id), so
// the result is the same whatever the reduction shape. Shared by argmax.cu and top_k.cu.
#pragma once
#include <cuda_runtime.h>

namespace tf::cuda {

// True when (value, id) beats (best_value, best_id): larger value, or equal value and lower id.
__device__ __forceinline__ bool beats(float value, int id, float best_value, int best_id) {
  return value > best_value || (value == best_value && id < best_id);
}

// Reduces every thread's (*value, *id) over a block of kThreads threads; thread 0 ends with the
// block's best, the others with their warp's. warp_values/warp_ids: shared, kThreads / 32 each.
template <int kThreads>
__device__ __forceinline__ void block_argmax(float* value, int* id, float* warp_values, int* warp_ids) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_value = __shfl_xor_sync(0xffffffffu, *value, offset);
    const int other_id = __shfl_xor_sync(0xffffffffu, *id, offset);
    if (beats(other_value, other_id, *value, *id)) {
      *value = other_value;
      *id = other_id;
    }
  }
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  if (lane == 0) {
    warp_values[warp] = *value;
    warp_ids[warp] = *id;
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kThreads / 32; ++w)
      if (beats(warp_values[w], warp_ids[w], *value, *id)) {
        *value = warp_values[w];
        *id = warp_ids[w];
      }
}

}  // namespace tf::cuda
