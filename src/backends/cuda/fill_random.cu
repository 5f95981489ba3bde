// Hash-based fill: each element from splitmix64(seed + i), so the result depends on nothing else.
#include "backends/cuda/fill_random.cuh"

#include "backends/cuda/affine_layout.h"
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

__device__ __forceinline__ uint64_t hash_of(uint64_t seed, int64_t i) {
  return splitmix64(seed ^ (uint64_t(i) * 0xd1342543de82ef95ull));
}

__global__ void fill_random_kernel(uint16_t* out, int64_t n, uint64_t seed, float scale, float center) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t bits = uint32_t(hash_of(seed, i) >> 40);  // 24 bits
    const float uniform = float(bits) * (2.0f / 16777216.0f) - 1.0f;
    out[i] = f32_to_bf16_bits(center + uniform * scale);
  }
}

__global__ void fill_random_u32_kernel(uint32_t* out, int64_t n, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = uint32_t(hash_of(seed, i) >> 32);
}

__global__ void fill_random_scale_bias_kernel(uint32_t* out, int64_t n, uint64_t seed, float scale, int exponent_shift) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t hash = hash_of(seed, i);
    const float scale_jitter = float(uint32_t(hash) & 0xffffu) * (2.0f / 65536.0f) - 1.0f;
    const float bias_jitter = float(uint32_t(hash >> 16) & 0xffffu) * (2.0f / 65536.0f) - 1.0f;
    // The scale as the kernels store it (affine_layout.h): a normal bf16, so 2^exponent_shift is an
    // addition to its exponent field.
    out[i] = (uint32_t(f32_to_bf16_bits(scale * (1.0f + 0.01f * scale_jitter))) + (uint32_t(exponent_shift) << 7)) |
             uint32_t(f32_to_bf16_bits(-0.02f * (1.0f + 0.01f * bias_jitter))) << 16;
  }
}

constexpr int kThreads = 256;

unsigned n_blocks_for(int64_t n) {
  const int64_t n_blocks = (n + kThreads - 1) / kThreads;
  return unsigned(n_blocks < 65536 ? n_blocks : 65536);
}

}  // namespace

void fill_random_bf16(uint16_t* out, int64_t n, uint64_t seed, float scale, float center, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n >= 0, "fill_random_bf16: negative size");
  if (n == 0) return;
  fill_random_kernel<<<n_blocks_for(n), kThreads, 0, stream>>>(out, n, seed, scale, center);
  TF_CUDA_CHECK_LAUNCH("fill_random_kernel");
}

void fill_random_u32(uint32_t* out, int64_t n, uint64_t seed, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n >= 0, "fill_random_u32: negative size");
  if (n == 0) return;
  fill_random_u32_kernel<<<n_blocks_for(n), kThreads, 0, stream>>>(out, n, seed);
  TF_CUDA_CHECK_LAUNCH("fill_random_u32_kernel");
}

void fill_random_scale_bias(uint32_t* out, int64_t n, uint64_t seed, int bits, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n >= 0 && (bits == 4 || bits == 8), "fill_random_scale_bias: 4 or 8 bits");
  if (n == 0) return;
  fill_random_scale_bias_kernel<<<n_blocks_for(n), kThreads, 0, stream>>>(out, n, seed, 0.04f / float(1 << bits),
                                                                      gpu_scale_exponent(bits));
  TF_CUDA_CHECK_LAUNCH("fill_random_scale_bias_kernel");
}

}  // namespace tf::cuda
