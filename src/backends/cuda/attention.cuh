// Causal / tree attention over a paged bf16 KV cache, by logical position, on the GPU.
// Each (row, head) visits its keys in logical order in chunks of kAttentionChunk (the CPU's 64),
// merging the online softmax chunk by chunk; physical slots are read through the row's slot list,
// so neither neighbour rows nor key placement change a row's result.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

constexpr int kAttentionChunk = 64;

struct AttentionShape {
  int n_heads;
  int n_kv_heads;
  int head_dim;  // a multiple of 8, at most 256
  float scale;   // 1/sqrt(head_dim)
};

// q, out: [n_rows][n_heads * head_dim] bf16 bits.
// k_cache, v_cache: [n_slots][n_kv_heads * head_dim] bf16 bits (this layer's slice).
// slots: every row's key slots, concatenated; row r's keys in logical order are
// slots[slot_offsets[r] .. slot_offsets[r] + n_keys[r]) (all three arrays on the device).
// A row with no keys gives zeros.
void attention_bf16(const uint16_t* q, int64_t n_rows, const uint16_t* k_cache, const uint16_t* v_cache,
                    const int32_t* slots, const int32_t* slot_offsets, const int32_t* n_keys,
                    const AttentionShape& shape, uint16_t* out, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
