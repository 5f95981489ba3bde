// q/k norm, RoPE and the cache write in one kernel: one warp per head, with the per-row math of
// row_math.cuh, so the results equal the standalone kernels' bit for bit.
#include "backends/cuda/fused_norms.cuh"

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"
#include "backends/cuda/row_math.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxHeadDim = 256;

// Warp w of a block takes head slot (blockIdx.x * kWarpsPerBlock + w) of the flattened
// [row][q heads | k heads | v heads] list.
__global__ void qk_norm_rope_to_cache_kernel(const uint16_t* __restrict__ qkv, int n_rows, QkvShape shape,
                                             const uint16_t* __restrict__ q_gain, const uint16_t* __restrict__ k_gain,
                                             float eps, const int32_t* __restrict__ positions,
                                             const float* __restrict__ inverse_frequencies,
                                             const int32_t* __restrict__ kv_slots, uint16_t* __restrict__ q_out,
                                             uint16_t* __restrict__ k_cache, uint16_t* __restrict__ v_cache) {
  __shared__ float normed[kWarpsPerBlock][kMaxHeadDim];
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int heads_per_row = shape.n_heads + 2 * shape.n_kv_heads;
  const int64_t slot_index = int64_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (slot_index >= int64_t(n_rows) * heads_per_row) return;
  const int row = int(slot_index / heads_per_row), head = int(slot_index % heads_per_row);
  const int head_dim = shape.head_dim;
  const int rotary_dim = shape.rotary_dim > 0 ? shape.rotary_dim : head_dim, half = rotary_dim / 2;
  const int64_t kv_dim = int64_t(shape.n_kv_heads) * head_dim;
  // A gated query head spans two heads' width (query, then gate); k and v heads follow the queries.
  const int query_width = shape.gated_query ? 2 * head_dim : head_dim;
  const int64_t row_width = int64_t(shape.n_heads) * query_width + 2 * kv_dim;
  const int64_t head_offset = head < shape.n_heads ? int64_t(head) * query_width
                                                   : int64_t(shape.n_heads) * query_width + int64_t(head - shape.n_heads) * head_dim;
  const uint16_t* source = qkv + int64_t(row) * row_width + head_offset;

  if (head >= shape.n_heads + shape.n_kv_heads) {  // a value head goes to the cache as is
    uint16_t* target = v_cache + int64_t(kv_slots[row]) * kv_dim + int64_t(head - shape.n_heads - shape.n_kv_heads) * head_dim;
    for (int piece = lane; piece < head_dim / 8; piece += 32)
      reinterpret_cast<uint4*>(target)[piece] = reinterpret_cast<const uint4*>(source)[piece];
    return;
  }
  const bool is_query = head < shape.n_heads;
  const uint16_t* gain = is_query ? q_gain : k_gain;
  uint16_t* target = is_query ? q_out + int64_t(row) * shape.n_heads * head_dim + int64_t(head) * head_dim
                              : k_cache + int64_t(kv_slots[row]) * kv_dim + int64_t(head - shape.n_heads) * head_dim;
  const float inverse_rms = warp_inverse_rms(source, head_dim, eps, lane);
  float* head_values = normed[warp];
  for (int piece = lane; piece < head_dim / 8; piece += 32) {
    float v[8];
    normalized_piece(source, gain, inverse_rms, piece, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) head_values[8 * piece + i] = v[i];
  }
  __syncwarp();
  const int32_t position = positions[row];
  for (int i = lane; i < half; i += 32)
    rotate_pair(head_values[i], head_values[i + half], position, inverse_frequencies[i], target[i], target[i + half]);
  for (int i = rotary_dim + lane; i < head_dim; i += 32) target[i] = f32_to_bf16_bits(head_values[i]);  // exact: already bf16
}

}  // namespace

void qk_norm_rope_to_cache_bf16(const uint16_t* qkv, int64_t n_rows, const QkvShape& shape, const uint16_t* q_gain,
                                const uint16_t* k_gain, float eps, const int32_t* positions,
                                const float* inverse_frequencies, const int32_t* kv_slots, uint16_t* q_out,
                                uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream) {
  TF_CUDA_REQUIRE(shape.n_heads > 0 && shape.n_kv_heads > 0 && shape.head_dim > 0 && shape.head_dim % 8 == 0 &&
                      shape.head_dim <= kMaxHeadDim,
                  "qk_norm_rope_to_cache_bf16: head_dim must be a multiple of 8 up to 256");
  TF_CUDA_REQUIRE(shape.rotary_dim >= 0 && shape.rotary_dim % 2 == 0 && shape.rotary_dim <= shape.head_dim,
                  "qk_norm_rope_to_cache_bf16: rotary_dim must be even and at most head_dim");
  TF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(qkv) % 16 == 0 && reinterpret_cast<uintptr_t>(q_out) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(v_cache) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(q_gain) % 16 == 0 && reinterpret_cast<uintptr_t>(k_gain) % 16 == 0,
                  "qk_norm_rope_to_cache_bf16: buffers must be 16-byte aligned");
  const int64_t n_heads = n_rows * (shape.n_heads + 2 * shape.n_kv_heads);
  TF_CUDA_REQUIRE(n_rows >= 0 && n_heads < (int64_t(1) << 31), "qk_norm_rope_to_cache_bf16: too many rows");
  if (n_rows == 0) return;
  const unsigned n_blocks = unsigned((n_heads + kWarpsPerBlock - 1) / kWarpsPerBlock);
  launch_overlapped("qk_norm_rope_to_cache_kernel", qk_norm_rope_to_cache_kernel, dim3(n_blocks),
                    dim3(kWarpsPerBlock * 32), 0, stream, qkv, int(n_rows), shape, q_gain, k_gain, eps, positions,
                    inverse_frequencies, kv_slots, q_out, k_cache, v_cache);
}

}  // namespace tf::cuda
