// Attention with the AVX-512 BF16 dot product, the avx512_bf16 level's numerics (see simd.h): the
// query, each key and value and each softmax weight rounded to bf16 as they are read, the scores
// and the weighted values summed by vdpbf16ps. attention() dispatches here; the layout of every sum
// is that of attention.cpp's f32 kernel with a bf16 pair where it has one float, so a row's bits
// depend only on its query, its keys in logical order and head_dim (never on other rows, threads
// or where keys live), as there.
#pragma once
#include <cstdint>

#include "backends/cpu/kernels/attention.h"

namespace tf::cpu {

// Whether attention() takes this path: the avx512_bf16 level, and head_dim 64, 128 or 256.
bool attention_takes_bf16_dot(int64_t head_dim);

// attention()'s contract, on this path, over an f32 or a bf16 cache.
void attention_bf16_dot(const float* q, int64_t n_rows, const KvSlice& cache, const int32_t* const* key_slots,
                        const int32_t* n_keys, const AttentionShape& shape, float* out, ThreadPool& pool);

// Writes row [n_kv_heads][head_dim] to slot of a bf16 cache, each element rounded as this path
// rounds an f32 cache's on reading (vcvtne2ps2bf16), so both caches give the same bits.
void store_kv_row_bf16(uint16_t* cache, const KvLayout& layout, int64_t slot, const float* row, int64_t n_kv_heads,
                       int64_t head_dim);

}  // namespace tf::cpu
