// Attention on tensor cores. A block takes one KV head of a group of rows that share keys (a chain:
// each row's key list is a prefix of the group's last row's) and one split of their keys. Its 4
// warps own 16 (row, head) query rows each; per 64-key chunk, every copy of the chunk's keys and
// values is in flight at once (cp.async), then each warp scores its rows against the chunk with
// mma.m16n8k16 (f32 accumulation over head_dim in k16 steps), runs the online softmax in registers
// and adds probabilities x values with mma as well: each probability as two bf16 terms (hi + lo),
// so it keeps about 16 bits. Every value an element gets depends on its own row, head and keys
// only: masked keys add exact zeros and chunks past a row's keys leave its state untouched, so a
// row gives the same bits alone or in any group. With few rows each split runs as its own block and
// a second kernel merges a row's split partials in split order; with many, a block runs its
// splits in order and merges them as it goes, with the same formula. Kernels are compiled per
// head_dim bucket (64, 128, 256); the loops run to the actual head_dim, so any multiple of 8 up to
// 256 works (padded to 16 with zeros).
#include "backends/cuda/attention.cuh"

#include <algorithm>

#include "backends/cuda/bf16_math.cuh"
#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/overlapped_launch.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kQueryRows = 16 * kWarps;  // (row, head) pairs of one KV head per block
constexpr int kMergeWarpsPerBlock = 4;
// Up to this many (row, head) pairs the rows alone leave most of the GPU idle, so their splits
// run as separate blocks; the scratch this takes is bounded by it.
constexpr int64_t kMaxSplitPairs = 4096;
// Shared-memory rows are padded by 16 bytes so the 8 rows of an ldmatrix hit different banks.
constexpr int kPad = 8;

struct Params {
  const uint16_t* q;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  const int32_t* slots;
  const int32_t* slot_offsets;
  const int32_t* n_keys;
  const int32_t* group_starts;  // [n_groups + 1] or null: every row alone
  const int32_t* n_groups;
  AttentionShape shape;
  uint16_t* out;
  float* partial_stats;  // [n_rows * n_heads][kAttentionMaxSplits][2] (max, sum); null: no split pass
  float* partial_acc;    // [n_rows * n_heads][kAttentionMaxSplits][head_dim]
};

// A softmax partial as one lane holds it for one query row: the running max, the sum of
// exp(score - max) and the lane's output dimensions of sum(exp(score - max) * value). Empty: max
// -inf, zeros. Used where a warp merges split partials (lane l owns dimensions l, l+32, ...).
template <int kPerLane>
struct Partial {
  float max = -INFINITY;
  float sum = 0.0f;
  float acc[kPerLane] = {};
};

// The one merge formula: both sides rescaled to the larger max. An empty `into` takes `part`
// exactly (its scale is exp(-inf) = 0, part's exp(0) = 1).
struct MergeScales {
  float into, part, max;
};

__device__ __forceinline__ MergeScales merge_scales(float into_max, float part_max) {
  const float new_max = fmaxf(into_max, part_max);
  return {expf(into_max - new_max), expf(part_max - new_max), new_max};
}

__device__ __forceinline__ float merged(float into, float part, const MergeScales& s) {
  return __fadd_rn(__fmul_rn(into, s.into), __fmul_rn(part, s.part));
}

__device__ __forceinline__ uint16_t output_bits(float acc, float sum, int n_keys) {
  return f32_to_bf16_bits(n_keys > 0 ? __fdiv_rn(acc, sum) : 0.0f);
}

__device__ __forceinline__ void copy_async_16(void* shared, const void* global, bool is_real) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  // With a source size of 0 nothing is read and the 16 bytes are zero-filled.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(address), "l"(global), "r"(is_real ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void wait_async_copies() { asm volatile("cp.async.wait_all;" ::: "memory"); }

__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], const uint16_t* shared) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void load_matrices_transposed(uint32_t (&r)[4], const uint16_t* shared) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(uint16_t low, uint16_t high) { return uint32_t(low) | (uint32_t(high) << 16); }

// The rows a block serves: a group of chain rows, or one row.
struct RowGroup {
  int first_row, n_rows;
};

// Where a block's query row (0 .. kQueryRows) lives: its batch row, its head, its pair index.
struct QueryRow {
  bool is_real;
  int row;
  int64_t pair;
};

__device__ __forceinline__ QueryRow query_row(const Params& p, const RowGroup& group, int kv_head, int index) {
  const int heads_per_kv = p.shape.n_heads / p.shape.n_kv_heads;
  const int in_group = index / heads_per_kv, head = index % heads_per_kv;
  const bool is_real = in_group < group.n_rows;
  const int row = group.first_row + (is_real ? in_group : 0);
  return {is_real, row, int64_t(row) * p.shape.n_heads + int64_t(kv_head) * heads_per_kv + head};
}

struct SharedTiles {
  uint16_t* queries;  // [kQueryRows][stride]
  uint16_t* keys;     // [kAttentionChunk][stride]
  uint16_t* values;   // [kAttentionChunk][stride]
  float* totals;      // [kWarps][head_dim / 8][4][32]: each lane's merged split partials
};

// One warp's 16 query rows over a run of chunks: the online softmax state of the two rows
// (g = lane / 4 and g + 8) this lane holds, and its output fragments (n8 tiles of head_dim).
template <int kMaxHeadDim>
struct WarpState {
  float max[2] = {-INFINITY, -INFINITY};
  float sum[2] = {0.0f, 0.0f};
  float acc[kMaxHeadDim / 8][4] = {};
};

// Scores, online softmax and values for one chunk already in shared memory. row_keys: each of the
// lane's two rows' key counts (0 for a row that is not real); chunk_start: the chunk's first key.
template <int kMaxHeadDim>
__device__ void attend_chunk(const Params& p, const SharedTiles& tiles, int warp, int chunk_start,
                             const int (&row_keys)[2], WarpState<kMaxHeadDim>& state) {
  constexpr int kDimTiles = kMaxHeadDim / 8;
  const int lane = int(threadIdx.x) % 32, q = lane % 4;
  const int head_dim = p.shape.head_dim, stride = (head_dim + 15) / 16 * 16 + kPad;
  const int n_key_steps = (head_dim + 15) / 16;

  // Scores: S[16 rows][64 keys] = Q K^T, k16 steps over head_dim in order.
  float scores[8][4] = {};
  const int matrix = lane / 8, matrix_row = lane % 8;
  for (int step = 0; step < n_key_steps; ++step) {
    uint32_t a[4];
    load_matrices(a, tiles.queries + (16 * warp + matrix_row + 8 * (matrix % 2)) * stride + 16 * step + 8 * (matrix / 2));
#pragma unroll
    for (int pair = 0; pair < 4; ++pair) {
      uint32_t b[4];
      load_matrices(b, tiles.keys + (16 * pair + matrix_row + 8 * (matrix / 2)) * stride + 16 * step + 8 * (matrix % 2));
      mma_bf16(scores[2 * pair], a, b[0], b[1]);
      mma_bf16(scores[2 * pair + 1], a, b[2], b[3]);
    }
  }

  // Element e of key tile j: row g + 8 (e / 2), key 8j + 2q + e % 2.
  float chunk_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = chunk_start + 8 * j + 2 * q + e % 2;
      scores[j][e] = key < row_keys[e / 2] ? __fmul_rn(scores[j][e], p.shape.scale) : -INFINITY;
      chunk_max[e / 2] = fmaxf(chunk_max[e / 2], scores[j][e]);
    }
  float base[2], rescale[2], chunk_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    chunk_max[h] = fmaxf(chunk_max[h], __shfl_xor_sync(0xffffffffu, chunk_max[h], 1));
    chunk_max[h] = fmaxf(chunk_max[h], __shfl_xor_sync(0xffffffffu, chunk_max[h], 2));
    const float new_max = fmaxf(state.max[h], chunk_max[h]);
    // A row with no key yet keeps its empty state exactly: exp(-inf - 0) = 0 everywhere.
    base[h] = new_max == -INFINITY ? 0.0f : new_max;
    rescale[h] = expf(state.max[h] - base[h]);
    state.max[h] = new_max;
  }
  uint32_t high[4][4], low[4][4];  // probabilities as the A operand of each k16 step over keys
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    uint16_t hi_bits[4], lo_bits[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float probability = expf(scores[j][e] - base[e / 2]);
      chunk_sum[e / 2] = __fadd_rn(chunk_sum[e / 2], probability);
      hi_bits[e] = f32_to_bf16_bits(probability);
      lo_bits[e] = f32_to_bf16_bits(__fsub_rn(probability, bf16_bits_to_f32(hi_bits[e])));
    }
    // Key tile j is half of k16 step j / 2: a0/a1 (first 8 keys) or a2/a3 (last 8).
    high[j / 2][2 * (j % 2)] = pack_bf16x2(hi_bits[0], hi_bits[1]);
    high[j / 2][2 * (j % 2) + 1] = pack_bf16x2(hi_bits[2], hi_bits[3]);
    low[j / 2][2 * (j % 2)] = pack_bf16x2(lo_bits[0], lo_bits[1]);
    low[j / 2][2 * (j % 2) + 1] = pack_bf16x2(lo_bits[2], lo_bits[3]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    chunk_sum[h] = chunk_sum[h] + __shfl_xor_sync(0xffffffffu, chunk_sum[h], 1);
    chunk_sum[h] = chunk_sum[h] + __shfl_xor_sync(0xffffffffu, chunk_sum[h], 2);
    state.sum[h] = __fadd_rn(__fmul_rn(state.sum[h], rescale[h]), chunk_sum[h]);
  }
#pragma unroll
  for (int t = 0; t < kDimTiles; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) state.acc[t][e] = __fmul_rn(state.acc[t][e], rescale[e / 2]);

  // Values: acc += P V, k16 steps over keys in order, the high terms then the low ones.
  const int n_dim_pairs = (head_dim + 15) / 16;
#pragma unroll
  for (int step = 0; step < 4; ++step) {
#pragma unroll
    for (int pair = 0; pair < kDimTiles / 2; ++pair) {
      if (pair >= n_dim_pairs) break;
      uint32_t b[4];
      load_matrices_transposed(
          b, tiles.values + (16 * step + matrix_row + 8 * (matrix % 2)) * stride + 16 * pair + 8 * (matrix / 2));
      mma_bf16(state.acc[2 * pair], high[step], b[0], b[1]);
      mma_bf16(state.acc[2 * pair], low[step], b[0], b[1]);
      mma_bf16(state.acc[2 * pair + 1], high[step], b[2], b[3]);
      mma_bf16(state.acc[2 * pair + 1], low[step], b[2], b[3]);
    }
  }
}

// A (row, head)'s split partials from scratch, merged in split order, to its output. The partials
// come from other blocks: read past L1, kMergeBatch splits' loads in flight at once.
template <int kMaxHeadDim>
__device__ void merge_splits(const Params& p, int64_t pair, int n_splits, int n_keys, int lane) {
  constexpr int kPerLane = kMaxHeadDim / 32, kMergeBatch = 8;
  const int head_dim = p.shape.head_dim;
  Partial<kPerLane> row;
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
    for (int b = 0; b < kMergeBatch; ++b) {
      if (first + b >= n_splits) break;
      const MergeScales s = merge_scales(row.max, parts[b].max);
      row.sum = merged(row.sum, parts[b].sum, s);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) row.acc[i] = merged(row.acc[i], parts[b].acc[i], s);
      row.max = s.max;
    }
  }
  uint16_t* out_head = p.out + pair * head_dim;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < head_dim) out_head[lane + 32 * i] = output_bits(row.acc[i], row.sum, n_keys);
}

// A row's split count when its group cuts splits of split_keys keys (the row's own cut too).
__device__ int splits_of(int n_keys, int split_keys) { return (n_keys + split_keys - 1) / split_keys; }

// blockIdx.x: (row group, KV head); blockIdx.y: the split (always 0 without scratch: then this
// block runs the splits in order).
template <int kMaxHeadDim>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(Params p) {
  constexpr int kDimTiles = kMaxHeadDim / 8;
  constexpr int kCopiesPerThread = kAttentionChunk * kMaxHeadDim / 8 / (kWarps * 32);  // 16-byte pieces
  // Up to the wait on the kernel before, the block reads only what the forward's upload wrote
  // before its first kernel (groups, key counts, slot lists), and asks L2 for its first chunk's
  // keys and values: a prefetch returns nothing, so a key the kernel before is still writing is
  // never read stale, and the chain of lookups to the keys runs while that kernel finishes.
  extern __shared__ uint4 shared_memory[];  // uint4: 16-byte alignment for the tile copies
  const AttentionShape& shape = p.shape;
  const int head_dim = shape.head_dim, padded_dim = (head_dim + 15) / 16 * 16, stride = padded_dim + kPad;
  const int kv_head = int(blockIdx.x % unsigned(shape.n_kv_heads));
  const int group_index = int(blockIdx.x / unsigned(shape.n_kv_heads));
  RowGroup group{group_index, 1};
  if (p.group_starts != nullptr) {
    if (group_index >= *p.n_groups) return;
    group = {p.group_starts[group_index], p.group_starts[group_index + 1] - p.group_starts[group_index]};
  }
  const int last_row = group.first_row + group.n_rows - 1;
  const int group_keys = p.n_keys[last_row];
  const int split_keys = attention_chunks_per_split(group_keys) * kAttentionChunk;
  const int n_splits = splits_of(group_keys, split_keys);
  const bool is_split_pass = p.partial_acc != nullptr && n_splits > 1;
  const int split = int(blockIdx.y);
  if (is_split_pass ? split >= n_splits : split > 0) return;  // the whole block leaves

  SharedTiles tiles;
  tiles.queries = reinterpret_cast<uint16_t*>(shared_memory);
  tiles.keys = tiles.queries + kQueryRows * stride;
  tiles.values = tiles.keys + kAttentionChunk * stride;
  tiles.totals = reinterpret_cast<float*>(tiles.values + kAttentionChunk * stride);

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
  const int kv_offset = kv_head * head_dim, pieces = padded_dim / 8;
  const int64_t kv_stride = int64_t(shape.n_kv_heads) * head_dim;
  const int32_t* group_slots = p.slots + p.slot_offsets[last_row];
  {
    const int first_key = is_split_pass ? split * split_keys : 0, lines = (head_dim * 2 + 127) / 128;
    for (int i = int(threadIdx.x); i < kAttentionChunk * lines; i += kWarps * 32) {
      const int key = first_key + i / lines;
      if (key >= group_keys) break;
      const int64_t at = int64_t(group_slots[key]) * kv_stride + kv_offset + (i % lines) * 64;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(p.k_cache + at));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(p.v_cache + at));
    }
  }
  wait_for_prior_kernel();
  let_next_kernel_start();
  for (int i = int(threadIdx.x); i < kQueryRows * pieces; i += kWarps * 32) {
    const int index = i / pieces, d = (i % pieces) * 8;
    const QueryRow query = query_row(p, group, kv_head, index);
    const bool is_real = query.is_real && d < head_dim;
    copy_async_16(tiles.queries + index * stride + d, p.q + (is_real ? query.pair * head_dim + d : 0), is_real);
  }
  // The two query rows this lane holds and their key counts (0: not a real row).
  int row_keys[2];
  QueryRow rows[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    rows[h] = query_row(p, group, kv_head, 16 * warp + g + 8 * h);
    row_keys[h] = rows[h].is_real ? p.n_keys[rows[h].row] : 0;
  }
  const bool warp_has_rows = 16 * warp < group.n_rows * (shape.n_heads / shape.n_kv_heads);

  float total_max[2] = {-INFINITY, -INFINITY}, total_sum[2] = {0.0f, 0.0f};
  float* totals = tiles.totals + warp * kDimTiles * 4 * 32 + lane;
  const int first_split = is_split_pass ? split : 0, end_split = is_split_pass ? split + 1 : n_splits;
  for (int s = first_split; s < end_split; ++s) {
    WarpState<kMaxHeadDim> state;
    const int split_end = min(group_keys, (s + 1) * split_keys);
    for (int chunk = s * split_keys; chunk < split_end; chunk += kAttentionChunk) {
      // Every slot first, then every copy: no copy waits on another's slot lookup.
      int64_t sources[kCopiesPerThread];
#pragma unroll
      for (int c = 0; c < kCopiesPerThread; ++c) {
        const int i = int(threadIdx.x) + c * kWarps * 32, j = i / pieces, d = (i % pieces) * 8;
        const bool is_real = j < kAttentionChunk && chunk + j < group_keys && d < head_dim;
        sources[c] = is_real ? int64_t(group_slots[chunk + j]) * kv_stride + kv_offset + d : -1;
      }
      __syncthreads();  // every warp is done with the previous chunk's tiles
#pragma unroll
      for (int c = 0; c < kCopiesPerThread; ++c) {
        const int i = int(threadIdx.x) + c * kWarps * 32, j = i / pieces, d = (i % pieces) * 8;
        if (j >= kAttentionChunk) break;
        const int64_t at = max(sources[c], int64_t(0));
        copy_async_16(tiles.keys + j * stride + d, p.k_cache + at, sources[c] >= 0);
        copy_async_16(tiles.values + j * stride + d, p.v_cache + at, sources[c] >= 0);
      }
      wait_async_copies();
      __syncthreads();
      if (warp_has_rows) attend_chunk<kMaxHeadDim>(p, tiles, warp, chunk, row_keys, state);
    }
    if (!warp_has_rows) continue;
    // A row of more than one split leaves each split's partial to the merge kernel in a split pass;
    // otherwise its splits merge into its total here, in order (a row's own splits only).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row_splits = splits_of(row_keys[h], split_keys);
      if (is_split_pass && row_splits > 1) {
        const int64_t at = rows[h].pair * kAttentionMaxSplits + s;
        if (q == 0) {
          p.partial_stats[2 * at] = state.max[h];
          p.partial_stats[2 * at + 1] = state.sum[h];
        }
#pragma unroll
        for (int t = 0; t < kDimTiles; ++t)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (8 * t + 2 * q + e < head_dim) p.partial_acc[at * head_dim + 8 * t + 2 * q + e] = state.acc[t][2 * h + e];
        continue;
      }
      if (s >= row_splits) continue;
      const MergeScales scales = merge_scales(total_max[h], state.max[h]);
      total_sum[h] = merged(total_sum[h], state.sum[h], scales);
      total_max[h] = scales.max;
#pragma unroll
      for (int t = 0; t < kDimTiles; ++t)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& total = totals[(t * 4 + 2 * h + e) * 32];
          total = merged(s == 0 ? 0.0f : total, state.acc[t][2 * h + e], scales);
        }
    }
  }
  if (!warp_has_rows) return;
  // The rows whose total is complete here (in a split pass, split 0's block writes the rows of
  // one split, and of none: zeros).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!rows[h].is_real || (is_split_pass && (split > 0 || splits_of(row_keys[h], split_keys) > 1))) continue;
    uint16_t* out_head = p.out + rows[h].pair * head_dim;
#pragma unroll
    for (int t = 0; t < kDimTiles; ++t)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int d = 8 * t + 2 * q + e;
        if (d < head_dim) out_head[d] = output_bits(totals[(t * 4 + 2 * h + e) * 32], total_sum[h], row_keys[h]);
      }
  }
}

// After a split pass: one warp per (row, head) of more than one split merges its partials.
template <int kMaxHeadDim>
__global__ void attention_merge_kernel(Params p, int64_t n_pairs) {
  wait_for_prior_kernel();
  let_next_kernel_start();
  const int64_t pair = int64_t(blockIdx.x) * kMergeWarpsPerBlock + int(threadIdx.x) / 32;
  if (pair >= n_pairs) return;
  const int n_keys = p.n_keys[pair / p.shape.n_heads];
  const int n_splits = splits_of(n_keys, attention_chunks_per_split(n_keys) * kAttentionChunk);
  if (n_splits <= 1) return;  // the split pass wrote it
  merge_splits<kMaxHeadDim>(p, pair, n_splits, n_keys, int(threadIdx.x) % 32);
}

size_t shared_bytes(int head_dim, int max_head_dim) {
  const size_t stride = size_t((head_dim + 15) / 16 * 16 + kPad);
  return (size_t(kQueryRows) + 2 * size_t(kAttentionChunk)) * stride * sizeof(uint16_t) +
         size_t(kWarps) * size_t(max_head_dim / 8) * 4 * 32 * sizeof(float);
}

template <int kMaxHeadDim>
void launch(const Params& p, int64_t n_rows, bool is_split, cudaStream_t stream) {
  // Groups are at most one per row; blocks past the last group leave at once.
  const int64_t n_blocks = n_rows * p.shape.n_kv_heads;
  TF_CUDA_REQUIRE(n_blocks < (int64_t(1) << 31), "attention_bf16: too many rows for one launch");
  const size_t n_shared = shared_bytes(p.shape.head_dim, kMaxHeadDim);
  if (n_shared > 48 * 1024)  // above the default limit a kernel must ask for its shared memory
    TF_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<kMaxHeadDim>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(n_shared)));
  const dim3 grid(unsigned(n_blocks), is_split ? unsigned(kAttentionMaxSplits) : 1u);
  launch_overlapped("attention_kernel", attention_kernel<kMaxHeadDim>, grid, dim3(kWarps * 32), n_shared, stream, p);
  if (!is_split) return;
  const int64_t n_pairs = n_rows * p.shape.n_heads;
  launch_overlapped("attention_merge_kernel", attention_merge_kernel<kMaxHeadDim>,
                    dim3(unsigned((n_pairs + kMergeWarpsPerBlock - 1) / kMergeWarpsPerBlock)),
                    dim3(kMergeWarpsPerBlock * 32), 0, stream, p, n_pairs);
}

}  // namespace

int attention_rows_per_group(const AttentionShape& shape) {
  return std::max(1, kQueryRows / (shape.n_heads / shape.n_kv_heads));
}

int64_t attention_scratch_floats(int64_t n_rows, const AttentionShape& shape) {
  const int64_t n_pairs = n_rows * shape.n_heads;
  if (n_pairs > kMaxSplitPairs) return 0;
  return n_pairs * kAttentionMaxSplits * (shape.head_dim + 2);
}

void attention_bf16(const uint16_t* q, int64_t n_rows, const uint16_t* k_cache, const uint16_t* v_cache,
                    const int32_t* slots, const int32_t* slot_offsets, const int32_t* n_keys,
                    const AttentionShape& shape, uint16_t* out, cudaStream_t stream, AttentionScratch scratch,
                    AttentionGroups groups) {
  TF_CUDA_REQUIRE(n_rows >= 0 && n_rows < (int64_t(1) << 31), "attention_bf16: bad row count");
  TF_CUDA_REQUIRE(shape.n_heads > 0 && shape.n_kv_heads > 0 && shape.n_heads % shape.n_kv_heads == 0 &&
                      shape.n_heads / shape.n_kv_heads <= kQueryRows,
                  "attention_bf16: n_heads must be a multiple of n_kv_heads, at most 64 of them");
  TF_CUDA_REQUIRE(shape.head_dim > 0 && shape.head_dim % 8 == 0 && shape.head_dim <= 256,
                  "attention_bf16: head_dim must be a multiple of 8 up to 256");
  TF_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(v_cache) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(q) % 16 == 0,
                  "attention_bf16: q, k_cache and v_cache must be 16-byte aligned");
  TF_CUDA_REQUIRE((groups.starts == nullptr) == (groups.n_groups == nullptr),
                  "attention_bf16: group starts and group count go together");
  if (n_rows == 0) return;
  const int64_t n_scratch = attention_scratch_floats(n_rows, shape);
  const bool is_split = n_scratch > 0 && scratch.data != nullptr && scratch.n_floats >= n_scratch;
  const int64_t n_stats = n_rows * shape.n_heads * kAttentionMaxSplits * 2;
  const Params p{q,
                 k_cache,
                 v_cache,
                 slots,
                 slot_offsets,
                 n_keys,
                 groups.starts,
                 groups.n_groups,
                 shape,
                 out,
                 is_split ? scratch.data : nullptr,
                 is_split ? scratch.data + n_stats : nullptr};
  if (shape.head_dim <= 64)
    launch<64>(p, n_rows, is_split, stream);
  else if (shape.head_dim <= 128)
    launch<128>(p, n_rows, is_split, stream);
  else
    launch<256>(p, n_rows, is_split, stream);
}

}  // namespace tf::cuda
