// Causal / tree attention over a block-allocated KV cache, by logical position.
// A query at position p sees keys 0..p, each resolved to a physical slot through key_slots.
// Keys are visited in logical-position order in chunks of kAttentionChunk, with the online-softmax
// merge done chunk by chunk, so the result does not depend on where keys live or on other rows.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/thread_pool.h"

namespace tf::cpu {

constexpr int64_t kAttentionChunk = 64;

struct AttentionShape {
  int64_t n_heads;
  int64_t n_kv_heads;
  int64_t head_dim;
  float scale;  // 1/sqrt(head_dim)
};

// Where a cache keeps its keys (or values): the head_dim floats of (slot, kv head) start at
// slot * slot_stride + head * head_stride. Only addresses depend on it, never a result.
struct KvLayout {
  int64_t slot_stride;
  int64_t head_stride;

  // [slot][kv head][dim]: a position's heads together (the drafter's and the MTP head's caches).
  static KvLayout interleaved(int64_t n_kv_heads, int64_t head_dim) { return {n_kv_heads * head_dim, head_dim}; }
  // [kv head][slot][dim]: a head's positions together, so attention streams them (the model's
  // cache, HostKvStorage: 1.3x the attention rate of interleaved heads, same bits).
  static KvLayout head_major(int64_t n_slots, int64_t head_dim) { return {head_dim, n_slots * head_dim}; }
};

// Writes one position's keys or values, row [n_kv_heads][head_dim], to its slot of cache.
inline void store_kv_row(float* cache, const KvLayout& layout, int64_t slot, const float* row, int64_t n_kv_heads,
                         int64_t head_dim) {
  for (int64_t head = 0; head < n_kv_heads; ++head)
    std::memcpy(cache + slot * layout.slot_stride + head * layout.head_stride, row + head * head_dim,
                size_t(head_dim) * sizeof(float));
}

// One layer's keys and values as attention reads them: f32, or bf16 where the machine's attention
// rounds every key and value to bf16 as it reads them anyway (attention_bf16_dot.h): the same bits
// from half the bytes. The layout counts elements.
struct KvSlice {
  void* keys = nullptr;
  void* values = nullptr;
  KvLayout layout{};
  bool is_bf16 = false;

  // Writes one position's keys and values, each [n_kv_heads][head_dim] f32, to slot.
  void store(int64_t slot, const float* k_row, const float* v_row, int64_t n_kv_heads, int64_t head_dim) const;
};

// q:   [n_rows][n_heads * head_dim]
// k_cache, v_cache: this layer's slice of the cache, laid out as `layout` says
// key_slots[r]: n_keys[r] physical slots, the key at logical position j is key_slots[r][j]
// out: [n_rows][n_heads * head_dim]
// Threads split (block of 8 rows, head) units, or (block, two heads of one group) where a group has an even
// number of heads; a block's rows take each chunk of keys in turn, so it is read from L1 after the first.
void attention(const float* q, int64_t n_rows, const float* k_cache, const float* v_cache, const KvLayout& layout,
               const int32_t* const* key_slots, const int32_t* n_keys, const AttentionShape& shape,
               float* out, ThreadPool& pool);
// The same over a slice of either element type (a bf16 one only at the level that made it).
void attention(const float* q, int64_t n_rows, const KvSlice& cache, const int32_t* const* key_slots,
               const int32_t* n_keys, const AttentionShape& shape, float* out, ThreadPool& pool);

}  // namespace tf::cpu
