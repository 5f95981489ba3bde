// Causal / tree attention over a block-allocated KV cache, by logical position.
// A query at position p sees keys 0..p, each resolved to a physical slot through key_slots.
// Keys are visited in logical-position order in chunks of kAttentionChunk, with the online-softmax
// merge done chunk by chunk, so the result does not depend on where keys live or on other rows.
#pragma once
#include <cstdint>

#include "core/thread_pool.h"

namespace tf::cpu {

constexpr int64_t kAttentionChunk = 64;

struct AttentionShape {
  int64_t n_heads;
  int64_t n_kv_heads;
  int64_t head_dim;
  float scale;  // 1/sqrt(head_dim)
};

// q:   [n_rows][n_heads * head_dim]
// k_cache, v_cache: [n_slots][n_kv_heads * head_dim] (this layer's slice of the cache)
// key_slots[r]: n_keys[r] physical slots, the key at logical position j is key_slots[r][j]
// out: [n_rows][n_heads * head_dim]
// Threads split (row, head) pairs, or (row, two heads of one group) where a group has an even number of heads.
void attention(const float* q, int64_t n_rows, const float* k_cache, const float* v_cache,
               const int32_t* const* key_slots, const int32_t* n_keys, const AttentionShape& shape,
               float* out, ThreadPool& pool);

}  // namespace tf::cpu
