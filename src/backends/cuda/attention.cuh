// Causal / tree attention over a paged bf16 KV cache, by logical position, on the GPU.
// A row's keys, in logical order, are cut into chunks of kAttentionChunk (the CPU's 64) and the
// chunks into at most kAttentionMaxSplits splits (attention_chunks_per_split); both cuts depend on
// the row's own key count only. Each split is an online softmax over its chunks in order; the
// splits' partials are then merged in split order with one formula. Physical slots are read through
// the row's slot list, so neither neighbour rows, the row count, nor key placement change a row's
// result.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace tf::cuda {

constexpr int kAttentionChunk = 64;
constexpr int kAttentionMaxSplits = 32;

// Chunks per split of a row with n_keys keys: as few as keep it at kAttentionMaxSplits splits.
__host__ __device__ inline int attention_chunks_per_split(int n_keys) {
  const int n_chunks = (n_keys + kAttentionChunk - 1) / kAttentionChunk;
  return n_chunks <= kAttentionMaxSplits ? 1 : (n_chunks + kAttentionMaxSplits - 1) / kAttentionMaxSplits;
}

struct AttentionShape {
  int n_heads;
  int n_kv_heads;
  int head_dim;  // a multiple of 8, at most 256
  float scale;   // 1/sqrt(head_dim)
};

// The attention shape of a model's or a drafter's config (anything with n_heads, n_kv_heads, head_dim).
template <class Config>
AttentionShape attention_shape_of(const Config& c) {
  return {int(c.n_heads), int(c.n_kv_heads), int(c.head_dim), float(1.0 / std::sqrt(double(c.head_dim)))};
}

// Device scratch for the splits' partials (f32), owned by the caller.
struct AttentionScratch {
  float* data = nullptr;
  int64_t n_floats = 0;
};

// Scratch a call over n_rows rows wants for its split pass; 0 when it would compute each row's
// splits one after another in one block anyway (many rows fill the GPU without splitting).
int64_t attention_scratch_floats(int64_t n_rows, const AttentionShape& shape);

// Rows that share keys, so one block serves them all: within a group each row's key list is a
// prefix of the group's last row's (a chain of positions: prefill chunks, verify chains), every
// row has the same attention_chunks_per_split, and a group has at most attention_rows_per_group rows. Device arrays: starts[0 .. n_groups] are the
// groups' first rows then n_rows, *n_groups their count. Null: every row on its own. Grouping
// changes which block computes a row, never its bits.
struct AttentionGroups {
  const int32_t* starts = nullptr;
  const int32_t* n_groups = nullptr;
};
int attention_rows_per_group(const AttentionShape& shape);

// q, out: [n_rows][n_heads * head_dim] bf16 bits.
// k_cache, v_cache: [n_slots][n_kv_heads * head_dim] bf16 bits (this layer's slice).
// slots: every row's key slots, concatenated; row r's keys in logical order are
// slots[slot_offsets[r] .. slot_offsets[r] + n_keys[r]) (all three arrays on the device).
// A row with no keys gives zeros. With scratch of attention_scratch_floats(n_rows, shape) floats
// the splits run in parallel; with less they run in order in one block. Results are bitwise the
// same either way: only where the work runs changes, not what is computed. slots, slot_offsets,
// n_keys and the groups are read before the wait on the kernel launched just before (overlapped
// launches): write them earlier than that kernel (a forward's upload is), never in it.
void attention_bf16(const uint16_t* q, int64_t n_rows, const uint16_t* k_cache, const uint16_t* v_cache,
                    const int32_t* slots, const int32_t* slot_offsets, const int32_t* n_keys,
                    const AttentionShape& shape, uint16_t* out, cudaStream_t stream = nullptr,
                    AttentionScratch scratch = {}, AttentionGroups groups = {});

}  // namespace tf::cuda
