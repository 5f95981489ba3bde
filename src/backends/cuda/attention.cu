// Attention: one warp per (row, head). Lane l scores keys l and l+32 of each 64-key chunk (a
// sequential dot over head_dim), and owns output dimensions l, l+32, l+64, ... for the values.
// Kernels are compiled per head_dim bucket (64, 128, 256: the register space); the loops run to
// the actual head_dim, so any multiple of 8 up to 256 works.
#include "backends/cuda/attention.cuh"

#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/cuda_check.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

template <int kMaxHeadDim>
__global__ void attention_kernel(const uint16_t* __restrict__ q, int n_rows, const uint16_t* __restrict__ k_cache,
                                 const uint16_t* __restrict__ v_cache, const int32_t* __restrict__ slots,
                                 const int32_t* __restrict__ slot_offsets, const int32_t* __restrict__ n_keys,
                                 AttentionShape shape, uint16_t* __restrict__ out) {
  constexpr int kPerLane = kMaxHeadDim / 32;
  __shared__ float query_shared[kWarpsPerBlock][kMaxHeadDim];
  __shared__ float probability_shared[kWarpsPerBlock][kAttentionChunk];
  __shared__ int32_t slot_shared[kWarpsPerBlock][kAttentionChunk];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t pair = int64_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (pair >= int64_t(n_rows) * shape.n_heads) return;  // whole warps leave; only warp syncs follow
  const int head_dim = shape.head_dim;
  const int row = int(pair / shape.n_heads), head = int(pair % shape.n_heads);
  const int kv_offset = (head / (shape.n_heads / shape.n_kv_heads)) * head_dim;
  const int64_t kv_stride = int64_t(shape.n_kv_heads) * head_dim;
  float* query = query_shared[warp];
  float* probabilities = probability_shared[warp];
  int32_t* chunk_slots = slot_shared[warp];

  const uint16_t* q_head = q + pair * head_dim;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < head_dim) query[lane + 32 * i] = bf16_bits_to_f32(q_head[lane + 32 * i]);
  __syncwarp();

  const int32_t* row_slots = slots + slot_offsets[row];
  const int n = n_keys[row];
  float acc[kPerLane] = {};
  float running_max = -INFINITY, sum = 0.0f;
  for (int chunk = 0; chunk < n; chunk += kAttentionChunk) {
    const int n_in_chunk = min(kAttentionChunk, n - chunk);
    float scores[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = lane + 32 * half;
      scores[half] = -INFINITY;
      if (j >= n_in_chunk) continue;
      const int32_t slot = row_slots[chunk + j];
      chunk_slots[j] = slot;
      const uint16_t* key = k_cache + int64_t(slot) * kv_stride + kv_offset;
      float dot = 0.0f;
#pragma unroll 4
      for (int d = 0; d < head_dim; d += 8) {
        float k8[8];
        unpack_bf16x8(*reinterpret_cast<const uint4*>(key + d), k8);
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = __fadd_rn(dot, __fmul_rn(query[d + i], k8[i]));
      }
      scores[half] = __fmul_rn(dot, shape.scale);
    }
    float chunk_max = fmaxf(scores[0], scores[1]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
    const float new_max = fmaxf(running_max, chunk_max);
    const float rescale = expf(running_max - new_max);  // 0 for the first chunk
    float chunk_sum = 0.0f;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = lane + 32 * half;
      const float p = j < n_in_chunk ? expf(scores[half] - new_max) : 0.0f;
      if (j < n_in_chunk) probabilities[j] = p;
      chunk_sum = __fadd_rn(chunk_sum, p);
    }
    // Butterfly: every lane ends with the same sum (IEEE addition commutes).
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) chunk_sum = chunk_sum + __shfl_xor_sync(0xffffffffu, chunk_sum, offset);
    sum = __fadd_rn(__fmul_rn(sum, rescale), chunk_sum);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] = __fmul_rn(acc[i], rescale);
    for (int j = 0; j < n_in_chunk; ++j) {
      const float p = probabilities[j];
      const uint16_t* value = v_cache + int64_t(chunk_slots[j]) * kv_stride + kv_offset + lane;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (lane + 32 * i < head_dim) acc[i] = __fadd_rn(acc[i], __fmul_rn(p, bf16_bits_to_f32(value[32 * i])));
    }
    running_max = new_max;
    __syncwarp();  // the next chunk overwrites probabilities and chunk_slots
  }
  uint16_t* out_head = out + pair * head_dim;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < head_dim) out_head[lane + 32 * i] = f32_to_bf16_bits(n > 0 ? __fdiv_rn(acc[i], sum) : 0.0f);
}

template <int kMaxHeadDim>
void launch(const uint16_t* q, int64_t n_rows, const uint16_t* k_cache, const uint16_t* v_cache, const int32_t* slots,
            const int32_t* slot_offsets, const int32_t* n_keys, const AttentionShape& shape, uint16_t* out,
            cudaStream_t stream) {
  const int64_t n_pairs = n_rows * shape.n_heads;
  attention_kernel<kMaxHeadDim><<<unsigned((n_pairs + kWarpsPerBlock - 1) / kWarpsPerBlock), kWarpsPerBlock * 32, 0, stream>>>(
      q, int(n_rows), k_cache, v_cache, slots, slot_offsets, n_keys, shape, out);
  TF_CUDA_CHECK_LAUNCH("attention_kernel");
}

}  // namespace

void attention_bf16(const uint16_t* q, int64_t n_rows, const uint16_t* k_cache, const uint16_t* v_cache,
                    const int32_t* slots, const int32_t* slot_offsets, const int32_t* n_keys,
                    const AttentionShape& shape, uint16_t* out, cudaStream_t stream) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_rows < (int64_t(1) << 31), "attention_bf16: bad row count");
  TF_CUDA_REQUIRE(shape.n_heads > 0 && shape.n_kv_heads > 0 && shape.n_heads % shape.n_kv_heads == 0,
                  "attention_bf16: n_heads must be a multiple of n_kv_heads");
  TF_CUDA_REQUIRE(shape.head_dim > 0 && shape.head_dim % 8 == 0 && shape.head_dim <= 256,
                  "attention_bf16: head_dim must be a multiple of 8 up to 256");
  if (n_rows == 0) return;
  if (shape.head_dim <= 64)
    launch<64>(q, n_rows, k_cache, v_cache, slots, slot_offsets, n_keys, shape, out, stream);
  else if (shape.head_dim <= 128)
    launch<128>(q, n_rows, k_cache, v_cache, slots, slot_offsets, n_keys, shape, out, stream);
  else
    launch<256>(q, n_rows, k_cache, v_cache, slots, slot_offsets, n_keys, shape, out, stream);
}

}  // namespace tf::cuda
