// Hash-based fill: each element from splitmix64(seed + i), so the result depends on nothing else.
#include "backends/cuda/fill_random.cuh"

#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fill_random_kernel(uint16_t* out, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t bits = uint32_t(splitmix64(seed ^ (uint64_t(i) * 0xd1342543de82ef95ull)) >> 40);  // 24 bits
    const float uniform = float(bits) * (2.0f / 16777216.0f) - 1.0f;
    out[i] = f32_to_bf16_bits(uniform * scale);
  }
}

}  // namespace

void fill_random_bf16(uint16_t* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n >= 0, "fill_random_bf16: negative size");
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t n_blocks = (n + kThreads - 1) / kThreads;
  fill_random_kernel<<<unsigned(n_blocks < 65536 ? n_blocks : 65536), kThreads, 0, stream>>>(out, n, seed, scale);
  TF_CUDA_CHECK_LAUNCH("fill_random_kernel");
}

}  // namespace tf::cuda
