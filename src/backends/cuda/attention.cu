// Attention in two passes. Pass 1: one block per (row, KV head, head tile, split); its warps are
// the query heads that share the KV head, so each chunk's keys and values are loaded into shared
// memory once for all of them (every copy of a chunk in flight at once). Lane l scores keys l and
// l+32 of a chunk (a sequential dot over head_dim) and owns output dimensions l, l+32, l+64, ...
// for the values. The last block of a (row, KV head, head tile) to finish its split merges every
// split's partial in split order (an arrival counter says which block is last; the order of the
// merge does not depend on it).
// With many rows the GPU is full without splitting, so one block walks a row's splits in order
// and merges them in registers: the same operations in the same order as pass 2, so the same bits.
// Kernels are compiled per head_dim bucket (64, 128, 256: the register space); the loops run to
// the actual head_dim, so any multiple of 8 up to 256 works.
#include "backends/cuda/attention.cuh"

#include <algorithm>

#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"

namespace tf::cuda {
namespace {

constexpr int kMaxHeadsPerBlock = 8;
// Up to this many (row, head) pairs the rows alone leave most of the GPU idle, so their splits
// run as separate blocks; the scratch this takes is bounded by it.
constexpr int64_t kMaxSplitPairs = 4096;
// Shared-memory rows of keys and values are padded by 16 bytes, so the 32 lanes reading 32
// different keys at the same offset hit different banks.
constexpr int kKeyPad = 8;

// How a row's keys are cut: splits of whole chunks, as few chunks per split as keep the row at
// kAttentionMaxSplits splits or fewer. A function of the row's key count only.
struct SplitPlan {
  int keys_per_split;
  int n_splits;
};

__device__ SplitPlan plan_splits(int n_keys) {
  const int n_chunks = (n_keys + kAttentionChunk - 1) / kAttentionChunk;
  const int chunks_per_split = max(1, (n_chunks + kAttentionMaxSplits - 1) / kAttentionMaxSplits);
  const int keys_per_split = chunks_per_split * kAttentionChunk;
  return {keys_per_split, (n_keys + keys_per_split - 1) / keys_per_split};
}

struct Params {
  const uint16_t* q;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  const int32_t* slots;
  const int32_t* slot_offsets;
  const int32_t* n_keys;
  AttentionShape shape;
  int heads_per_block;  // warps per pass-1 block
  int n_head_tiles;     // pass-1 blocks per (row, KV head, split)
  uint16_t* out;
  float* partial_stats;  // [n_rows * n_heads][kAttentionMaxSplits][2] (max, sum); null: no split pass
  float* partial_acc;    // [n_rows * n_heads][kAttentionMaxSplits][head_dim]
  unsigned* arrivals;    // [n_rows * n_kv_heads * n_head_tiles] split blocks done; 0 between calls
};

__device__ __forceinline__ void copy_async_16(void* shared, const void* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(address), "l"(global) : "memory");
}

__device__ __forceinline__ void wait_async_copies() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// A softmax partial as one lane holds it: the running max, the sum of exp(score - max) and the
// lane's output dimensions of sum(exp(score - max) * value). Empty: max -inf, zeros.
template <int kPerLane>
struct Partial {
  float max = -INFINITY;
  float sum = 0.0f;
  float acc[kPerLane] = {};
};

// The one merge formula: both sides rescaled to the larger max. An empty `into` takes `part`
// exactly (its scale is exp(-inf) = 0, part's exp(0) = 1).
template <int kPerLane>
__device__ void merge(Partial<kPerLane>& into, const Partial<kPerLane>& part) {
  const float new_max = fmaxf(into.max, part.max);
  const float into_scale = expf(into.max - new_max), part_scale = expf(part.max - new_max);
  into.sum = __fadd_rn(__fmul_rn(into.sum, into_scale), __fmul_rn(part.sum, part_scale));
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    into.acc[i] = __fadd_rn(__fmul_rn(into.acc[i], into_scale), __fmul_rn(part.acc[i], part_scale));
  into.max = new_max;
}

template <int kPerLane>
__device__ void write_output(const Params& p, int64_t pair, const Partial<kPerLane>& row, int n_keys, int lane) {
  const int head_dim = p.shape.head_dim;
  uint16_t* out_head = p.out + pair * head_dim;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < head_dim)
      out_head[lane + 32 * i] = f32_to_bf16_bits(n_keys > 0 ? __fdiv_rn(row.acc[i], row.sum) : 0.0f);
}

// Dynamic shared memory of a pass-1 block, carved at run time from head_dim.
struct SharedTiles {
  uint16_t* keys;        // [kAttentionChunk][head_dim + kKeyPad]
  uint16_t* values;      // [kAttentionChunk][head_dim + kKeyPad]
  float* queries;        // [heads_per_block][head_dim]
  float* probabilities;  // [heads_per_block][kAttentionChunk]
};

size_t shared_bytes(int head_dim, int heads_per_block) {
  return 2 * size_t(kAttentionChunk) * size_t(head_dim + kKeyPad) * sizeof(uint16_t) +
         size_t(heads_per_block) * size_t(head_dim + kAttentionChunk) * sizeof(float);
}

// Keys [key_begin, key_end) of a row for this block's heads: the online softmax over their chunks
// in order, from an empty partial. Every thread of the block calls it (it synchronises the block);
// a warp without a head (the short last tile of a group) only helps load.
template <int kMaxHeadDim>
__device__ Partial<kMaxHeadDim / 32> attend_keys(const Params& p, const SharedTiles& tiles, const int32_t* row_slots,
                                                  int key_begin, int key_end, int kv_offset, bool has_head) {
  constexpr int kPerLane = kMaxHeadDim / 32;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int head_dim = p.shape.head_dim, tile_stride = head_dim + kKeyPad, vectors_per_key = head_dim / 8;
  const int64_t kv_stride = int64_t(p.shape.n_kv_heads) * head_dim;
  const float* query = tiles.queries + warp * head_dim;
  float* probabilities = tiles.probabilities + warp * kAttentionChunk;
  Partial<kPerLane> part;
  for (int chunk = key_begin; chunk < key_end; chunk += kAttentionChunk) {
    const int n_in_chunk = min(kAttentionChunk, key_end - chunk);
    __syncthreads();  // every warp is done with the previous chunk's tiles (and the queries are stored)
    for (int i = int(threadIdx.x); i < n_in_chunk * vectors_per_key; i += int(blockDim.x)) {
      const int j = i / vectors_per_key, d = (i % vectors_per_key) * 8;
      const int64_t at = int64_t(row_slots[chunk + j]) * kv_stride + kv_offset + d;
      copy_async_16(tiles.keys + j * tile_stride + d, p.k_cache + at);
      copy_async_16(tiles.values + j * tile_stride + d, p.v_cache + at);
    }
    wait_async_copies();
    __syncthreads();
    if (!has_head) continue;

    float scores[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = lane + 32 * half;
      scores[half] = -INFINITY;
      if (j >= n_in_chunk) continue;
      const uint16_t* key = tiles.keys + j * tile_stride;
      float dot = 0.0f;
#pragma unroll 4
      for (int d = 0; d < head_dim; d += 8) {
        float k8[8];
        unpack_bf16x8(*reinterpret_cast<const uint4*>(key + d), k8);
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = __fadd_rn(dot, __fmul_rn(query[d + i], k8[i]));
      }
      scores[half] = __fmul_rn(dot, p.shape.scale);
    }
    float chunk_max = fmaxf(scores[0], scores[1]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
    const float new_max = fmaxf(part.max, chunk_max);
    const float rescale = expf(part.max - new_max);  // 0 for the first chunk
    float chunk_sum = 0.0f;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = lane + 32 * half;
      const float probability = j < n_in_chunk ? expf(scores[half] - new_max) : 0.0f;
      if (j < n_in_chunk) probabilities[j] = probability;
      chunk_sum = __fadd_rn(chunk_sum, probability);
    }
    // Butterfly: every lane ends with the same sum (IEEE addition commutes).
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) chunk_sum = chunk_sum + __shfl_xor_sync(0xffffffffu, chunk_sum, offset);
    part.sum = __fadd_rn(__fmul_rn(part.sum, rescale), chunk_sum);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) part.acc[i] = __fmul_rn(part.acc[i], rescale);
    for (int j = 0; j < n_in_chunk; ++j) {
      const float probability = probabilities[j];
      const uint16_t* value = tiles.values + j * tile_stride + lane;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (lane + 32 * i < head_dim)
          part.acc[i] = __fadd_rn(part.acc[i], __fmul_rn(probability, bf16_bits_to_f32(value[32 * i])));
    }
    part.max = new_max;
  }
  return part;
}

// A (row, head)'s split partials from scratch, merged in split order, to its output. The partials
// come from other blocks: read past L1, kMergeBatch splits' loads in flight at once.
template <int kMaxHeadDim>
__device__ void merge_splits(const Params& p, int64_t pair, int n_splits, int n_keys, int lane) {
  constexpr int kPerLane = kMaxHeadDim / 32, kMergeBatch = 8;
  const int head_dim = p.shape.head_dim;
  Partial<kPerLane> row_partial;
  for (int first = 0; first < n_splits; first += kMergeBatch) {
    Partial<kPerLane> parts[kMergeBatch];
#pragma unroll
    for (int b = 0; b < kMergeBatch; ++b) {
      if (first + b >= n_splits) break;
      const int64_t at = pair * kAttentionMaxSplits + first + b;
      parts[b].max = __ldcg(p.partial_stats + 2 * at);
      parts[b].sum = __ldcg(p.partial_stats + 2 * at + 1);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (lane + 32 * i < head_dim) parts[b].acc[i] = __ldcg(p.partial_acc + at * head_dim + lane + 32 * i);
    }
#pragma unroll
    for (int b = 0; b < kMergeBatch; ++b)
      if (first + b < n_splits) merge(row_partial, parts[b]);
  }
  write_output(p, pair, row_partial, n_keys, lane);
}

// blockIdx.x: (row, KV head, head tile); blockIdx.y: the split (always 0 without scratch).
// A row with one split, or any row when there is no split pass, is finished by its one block;
// otherwise by the last of its split blocks to arrive.
template <int kMaxHeadDim>
__global__ void attention_split_kernel(Params p) {
  constexpr int kPerLane = kMaxHeadDim / 32;
  wait_for_prior_kernel();
  let_next_kernel_start();
  extern __shared__ uint4 shared_memory[];  // uint4: 16-byte alignment for the tile loads
  const AttentionShape& shape = p.shape;
  const int head_dim = shape.head_dim, group = shape.n_heads / shape.n_kv_heads;
  const int tile = int(blockIdx.x % unsigned(p.n_head_tiles));
  const int kv_head = int(blockIdx.x / unsigned(p.n_head_tiles) % unsigned(shape.n_kv_heads));
  const int row = int(blockIdx.x / unsigned(p.n_head_tiles * shape.n_kv_heads));
  const int split = int(blockIdx.y);
  const int n_keys = p.n_keys[row];
  const SplitPlan plan = plan_splits(n_keys);
  const bool is_split_pass = p.partial_acc != nullptr && plan.n_splits > 1;
  if (is_split_pass ? split >= plan.n_splits : split > 0) return;  // the whole block leaves

  SharedTiles tiles;
  tiles.keys = reinterpret_cast<uint16_t*>(shared_memory);
  tiles.values = tiles.keys + kAttentionChunk * (head_dim + kKeyPad);
  tiles.queries = reinterpret_cast<float*>(tiles.values + kAttentionChunk * (head_dim + kKeyPad));
  tiles.probabilities = tiles.queries + p.heads_per_block * head_dim;

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int head_in_group = tile * p.heads_per_block + warp;
  const bool has_head = head_in_group < group;
  const int64_t pair = int64_t(row) * shape.n_heads + kv_head * group + head_in_group;
  if (has_head) {
    const uint16_t* q_head = p.q + pair * head_dim;
    for (int d = lane; d < head_dim; d += 32) tiles.queries[warp * head_dim + d] = bf16_bits_to_f32(q_head[d]);
  }
  const int32_t* row_slots = p.slots + p.slot_offsets[row];
  const int kv_offset = kv_head * head_dim;

  if (is_split_pass) {
    const int begin = split * plan.keys_per_split;
    const Partial<kPerLane> part =
        attend_keys<kMaxHeadDim>(p, tiles, row_slots, begin, min(n_keys, begin + plan.keys_per_split), kv_offset, has_head);
    if (has_head) {
      const int64_t at = pair * kAttentionMaxSplits + split;
      if (lane == 0) {
        p.partial_stats[2 * at] = part.max;
        p.partial_stats[2 * at + 1] = part.sum;
      }
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (lane + 32 * i < head_dim) p.partial_acc[at * head_dim + lane + 32 * i] = part.acc[i];
    }
    // Publish the partials, then count this block in; the last one merges.
    __shared__ bool is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned& arrived = p.arrivals[blockIdx.x];
      is_last = atomicAdd(&arrived, 1u) == unsigned(plan.n_splits - 1);
      if (is_last) arrived = 0;  // ready for the next call: every split has counted
    }
    __syncthreads();
    if (!is_last || !has_head) return;
    __threadfence();
    merge_splits<kMaxHeadDim>(p, pair, plan.n_splits, n_keys, lane);
    return;
  }
  Partial<kPerLane> row_partial;
  for (int s = 0; s < plan.n_splits; ++s) {
    const int begin = s * plan.keys_per_split;
    const Partial<kPerLane> part =
        attend_keys<kMaxHeadDim>(p, tiles, row_slots, begin, min(n_keys, begin + plan.keys_per_split), kv_offset, has_head);
    if (has_head) merge(row_partial, part);
  }
  if (has_head) write_output(p, pair, row_partial, n_keys, lane);
}

int heads_per_block(const AttentionShape& shape) {
  return std::min(shape.n_heads / shape.n_kv_heads, kMaxHeadsPerBlock);
}

template <int kMaxHeadDim>
void launch(Params p, int64_t n_rows, bool is_split, cudaStream_t stream) {
  const AttentionShape& shape = p.shape;
  const int64_t n_blocks = n_rows * shape.n_kv_heads * p.n_head_tiles;
  TF_CUDA_REQUIRE(n_blocks < (int64_t(1) << 31), "attention_bf16: too many rows for one launch");
  const size_t n_shared = shared_bytes(shape.head_dim, p.heads_per_block);
  if (n_shared > 48 * 1024)  // above the default limit a kernel must ask for its shared memory
    TF_CUDA_CHECK(cudaFuncSetAttribute(attention_split_kernel<kMaxHeadDim>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(n_shared)));
  const dim3 grid(unsigned(n_blocks), is_split ? unsigned(kAttentionMaxSplits) : 1u);
  launch_overlapped("attention_split_kernel", attention_split_kernel<kMaxHeadDim>, grid,
                    dim3(unsigned(p.heads_per_block * 32)), n_shared, stream, p);
}

}  // namespace

// One counter per split block group, (row, KV head, head tile): never more than the (row, head)
// pairs of a split pass. A fixed count, so the counters sit in the same place for every row count
// and stay zero between calls.
int64_t attention_scratch_counters() { return kMaxSplitPairs; }

int64_t attention_scratch_floats(int64_t n_rows, const AttentionShape& shape) {
  const int64_t n_pairs = n_rows * shape.n_heads;
  if (n_pairs > kMaxSplitPairs) return 0;
  return attention_scratch_counters() + n_pairs * kAttentionMaxSplits * (shape.head_dim + 2);
}

void attention_bf16(const uint16_t* q, int64_t n_rows, const uint16_t* k_cache, const uint16_t* v_cache,
                    const int32_t* slots, const int32_t* slot_offsets, const int32_t* n_keys,
                    const AttentionShape& shape, uint16_t* out, cudaStream_t stream, AttentionScratch scratch) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_rows < (int64_t(1) << 31), "attention_bf16: bad row count");
  TF_CUDA_REQUIRE(shape.n_heads > 0 && shape.n_kv_heads > 0 && shape.n_heads % shape.n_kv_heads == 0,
                  "attention_bf16: n_heads must be a multiple of n_kv_heads");
  TF_CUDA_REQUIRE(shape.head_dim > 0 && shape.head_dim % 8 == 0 && shape.head_dim <= 256,
                  "attention_bf16: head_dim must be a multiple of 8 up to 256");
  TF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(v_cache) % 16 == 0,
                  "attention_bf16: k_cache and v_cache must be 16-byte aligned");
  if (n_rows == 0) return;
  const int64_t n_scratch = attention_scratch_floats(n_rows, shape);
  const bool is_split = n_scratch > 0 && scratch.data != nullptr && scratch.n_floats >= n_scratch;
  const int64_t n_stats = n_rows * shape.n_heads * kAttentionMaxSplits * 2;
  const int per_block = heads_per_block(shape);
  const int group = shape.n_heads / shape.n_kv_heads;
  float* partials = scratch.data + attention_scratch_counters();
  const Params p{q, k_cache, v_cache, slots, slot_offsets, n_keys, shape, per_block, (group + per_block - 1) / per_block,
                 out, is_split ? partials : nullptr, is_split ? partials + n_stats : nullptr,
                 is_split ? reinterpret_cast<unsigned*>(scratch.data) : nullptr};
  if (shape.head_dim <= 64)
    launch<64>(p, n_rows, is_split, stream);
  else if (shape.head_dim <= 128)
    launch<128>(p, n_rows, is_split, stream);
  else
    launch<256>(p, n_rows, is_split, stream);
}

}  // namespace tf::cuda
