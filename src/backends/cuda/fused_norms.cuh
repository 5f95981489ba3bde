// The q/k norms of a decoder layer fused with RoPE and the cache write, to cut kernel launches.
// Each computes, bit for bit, what the standalone kernels compute in sequence (row_math.cuh holds
// the shared per-row math; tests compare the two).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tf::cuda {

struct QkvShape {
  int n_heads;
  int n_kv_heads;
  int head_dim;  // even, a multiple of 8, at most 256
  int rotary_dim = 0;        // the leading dimensions of each head that turn (0: all); the rest pass through
  bool gated_query = false;  // each query head is followed by its output gate (head_dim values) in the row
};

// From a fused q|k|v projection ([n_rows][(n_heads + 2 n_kv_heads) head_dim], or with gated_query
// [n_rows][(2 n_heads + 2 n_kv_heads) head_dim], query then gate per head): per-head RMSNorm of q and k
// with their gains, RoPE on the first rotary_dim dimensions at each row's position, q to q_out ([n_rows][n_heads head_dim]),
// k and v to their cache rows at kv_slots[row] ([n_slots][n_kv_heads head_dim]). The same bits as
// rms_norm_bf16, rope_bf16 and scatter_rows_bf16 in sequence.
void qk_norm_rope_to_cache_bf16(const uint16_t* qkv, int64_t n_rows, const QkvShape& shape, const uint16_t* q_gain,
                                const uint16_t* k_gain, float eps, const int32_t* positions,
                                const float* inverse_frequencies, const int32_t* kv_slots, uint16_t* q_out,
                                uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream = nullptr);

}  // namespace tf::cuda
